// Builds the demo page into the Python package; Django serves it under `base`
// (cascadebreaker/demo/web/site/assets.py reads the manifest).
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vite'

const root = fileURLToPath(new URL('.', import.meta.url))
const outDir = fileURLToPath(new URL('../../src/cascadebreaker/web/demo', import.meta.url))

// The hash of the sources a build came from, written next to the build: a test recomputes it
// (tests/web/test_assets.py) so CI notices committed assets older than their sources, no node.
function sourcesHash() {
  const files = ['package.json', 'package-lock.json', 'vite.config.js']
  const walk = (dir) =>
    readdirSync(dir, { withFileTypes: true }).forEach((entry) => {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else files.push(relative(root, path).split('\\').join('/'))
    })
  walk(join(root, 'src'))
  const digest = createHash('sha256')
  for (const file of files.sort()) {
    const content = createHash('sha256').update(readFileSync(join(root, file))).digest('hex')
    digest.update(`${file}\n${content}\n`)
  }
  return digest.digest('hex')
}

const stampSources = {
  name: 'stamp-sources',
  closeBundle() {
    writeFileSync(join(outDir, 'sources.sha256'), `${sourcesHash()}\n`)
  },
}

export default defineConfig({
  plugins: [vue(), stampSources],
  base: '/static/ccb-demo/',
  build: {
    outDir,
    emptyOutDir: true,
    manifest: 'manifest.json',
    rolldownOptions: { input: 'src/main.js' },
  },
})
