import { defineConfig } from 'vite';

/**
 * The web UI: built by `npm run setup` (scripts/setup.sh) into ui/dist, served by the service
 * (api/plugins/ui.ts). Hashed file names under assets/ let the service cache them for a year.
 */
export default defineConfig({
  root: import.meta.dirname,
  base: '/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    // No inline scripts or styles: the page's CSP allows 'self' only.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
