/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The gateway serves the built files and the API from one origin, so the console uses relative
// `/api/...` URLs and cookies. In `npm run dev` the API is proxied to a local gateway.
const gateway = process.env.RLARK_GATEWAY_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  plugins: [react()],
  server: {
    proxy: { '/api': { target: gateway, changeOrigin: false } },
  },
  build: {
    chunkSizeWarningLimit: 1500,
    rollupOptions: {
      output: {
        manualChunks(id: string) {
          if (id.includes('node_modules/@codemirror') || id.includes('node_modules/@uiw') || id.includes('node_modules/@lezer')) {
            return 'codemirror';
          }
          if (id.includes('node_modules/antd') || id.includes('node_modules/@ant-design') || id.includes('node_modules/@rc-component') || id.includes('node_modules/rc-')) {
            return 'antd';
          }
          return undefined;
        },
      },
    },
  },
  test: {
    environment: 'jsdom',
    globals: true,
    setupFiles: ['./src/test/setup.ts'],
    include: ['src/**/*.test.{ts,tsx}'],
    css: false,
    testTimeout: 30000,
    // One module graph for all files: Ant Design is imported once instead of once per file.
    isolate: false,
  },
});
