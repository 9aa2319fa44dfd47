import { createInertiaApp } from '@inertiajs/vue3'
import { createApp, h } from 'vue'
import './styles.css'

const pages = import.meta.glob('./pages/**/*.vue', { eager: true })

createInertiaApp({
  resolve: (name) => {
    const page = pages[`./pages/${name}.vue`]
    if (!page) throw new Error(`unknown page component ${name}`)
    return page.default
  },
  setup({ el, App, props, plugin }) {
    createApp({ render: () => h(App, props) }).use(plugin).mount(el)
  },
  progress: false,
  http: { xsrfCookieName: 'csrftoken', xsrfHeaderName: 'X-CSRFToken' },
})
