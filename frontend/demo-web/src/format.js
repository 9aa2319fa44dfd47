// Formatting shared by the widgets.

export function money(cents, currency) {
  return new Intl.NumberFormat('en-GB', { style: 'currency', currency }).format(cents / 100)
}

export function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString('en-GB')
}
