import { defineConfig } from 'vite';

// The Rust server serves web/dist at "/", so every asset path must be relative.
export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
  },
  server: {
    // `npm run dev` proxies the API to a running server (or test/mock-server.mjs).
    proxy: { '/api': process.env.BIMODAL_API ?? 'http://127.0.0.1:8080' },
  },
});
