import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const page = (name) => fileURLToPath(new URL(name, import.meta.url));

// The Rust server serves web/dist at "/", so every asset path must be relative.
export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    // One page per view (src/views.ts links them): the flame graph at /, the fleet at
    // /fleet.html, the comparison at /compare.html, one node at /node.html, alerts at /alerts.html.
    rollupOptions: {
      input: {
        main: page('./index.html'),
        fleet: page('./fleet.html'),
        compare: page('./compare.html'),
        node: page('./node.html'),
        alerts: page('./alerts.html'),
      },
    },
  },
  server: {
    // `npm run dev` proxies the API to a running server (or test/mock-server.mjs).
    proxy: { '/api': process.env.BIMODAL_API ?? 'http://127.0.0.1:8080' },
  },
});
