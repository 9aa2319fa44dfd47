// Builds the page of `ccb dashboard` into the Python package (shipped in the wheel, no CDN).
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import vue from "@vitejs/plugin-vue";
import { defineConfig, type Plugin } from "vite";

const root = fileURLToPath(new URL(".", import.meta.url));
const outDir = fileURLToPath(new URL("../../src/cascadebreaker/web/dashboard", import.meta.url));
const TOP = ["index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];

// The hash of the sources a build came from, written next to the build: a test recomputes it
// (tests/dashboard/test_server.py) so CI notices committed assets older than their sources.
function sourcesHash(): string {
  const files = [...TOP];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else files.push(relative(root, path).split("\\").join("/"));
    }
  };
  walk(join(root, "src"));
  const digest = createHash("sha256");
  for (const file of files.sort()) {
    const content = createHash("sha256").update(readFileSync(join(root, file))).digest("hex");
    digest.update(`${file}\n${content}\n`);
  }
  return digest.digest("hex");
}

const stampSources: Plugin = {
  name: "stamp-sources",
  closeBundle() {
    writeFileSync(join(outDir, "sources.sha256"), `${sourcesHash()}\n`);
  },
};

export default defineConfig({
  plugins: [vue(), stampSources],
  base: "./", // assets load relative to the page, so a reverse proxy may mount it anywhere
  build: {
    outDir,
    emptyOutDir: true,
    chunkSizeWarningLimit: 2000, // elkjs is one 1.4 MB module; it gets a chunk of its own
    rollupOptions: {
      output: {
        // A separate, content-hashed chunk for the layout engine: rebuilding the page does not
        // rewrite it, so the repository does not grow by a copy of elkjs per change.
        manualChunks: (id: string) => (id.includes("node_modules/elkjs") ? "elk" : undefined),
      },
    },
  },
});
