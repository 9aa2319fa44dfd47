// Small display helpers shared by the components.

export function clock(unixSeconds: number): string {
  const d = new Date(unixSeconds * 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function perSecond(value: number | undefined): string {
  if (value === undefined) return "–";
  return value >= 10 ? value.toFixed(0) : value.toFixed(1);
}

/** "courier * *" reads better as "courier (whole service)". */
export function endpointText(endpoint: string): string {
  return endpoint.endsWith(" * *") ? `${endpoint.slice(0, -4)} (whole service)` : endpoint;
}
