import { defineConfig } from 'vite';
import preact from '@preact/preset-vite';

export default defineConfig({
  plugins: [preact()],
  build: { outDir: 'dist', emptyOutDir: true, assetsDir: 'assets', sourcemap: false },
  server: { proxy: { '/v1': 'http://localhost:8080', '/openapi.yaml': 'http://localhost:8080' } },
});
