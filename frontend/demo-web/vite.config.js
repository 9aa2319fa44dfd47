// Builds the demo page into the Python package; Django serves it under `base`
// (cascadebreaker/demo/web/site/assets.py reads the manifest).
import { fileURLToPath } from 'node:url'
import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vite'

export default defineConfig({
  plugins: [vue()],
  base: '/static/ccb-demo/',
  build: {
    outDir: fileURLToPath(new URL('../../src/cascadebreaker/web/demo', import.meta.url)),
    emptyOutDir: true,
    manifest: 'manifest.json',
    rolldownOptions: { input: 'src/main.js' },
  },
})
