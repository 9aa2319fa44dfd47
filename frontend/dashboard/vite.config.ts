// Builds the page of `ccb dashboard` into the Python package (shipped in the wheel, no CDN).
import vue from "@vitejs/plugin-vue";
import { defineConfig } from "vite";

export default defineConfig({
  plugins: [vue()],
  base: "./", // assets load relative to the page, so a reverse proxy may mount it anywhere
  build: {
    outDir: "../../src/cascadebreaker/web/dashboard",
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
