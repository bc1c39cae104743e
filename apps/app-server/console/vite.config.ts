import { fileURLToPath } from 'node:url';
import { defaultClientConditions, defineConfig } from 'vite';

/**
 * The operator console: a static single-page app built into `dist/console`, which the app-server serves at
 * `/console` (shipped in the package: nothing is fetched at run time). Workspace packages (`@sluice/client`)
 * resolve to their TypeScript sources, so the console builds without building them first.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  publicDir: false,
  resolve: { conditions: ['@sluice/source', ...defaultClientConditions] },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  logLevel: 'warn',
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: true,
    // One small bundle: the console is a few pages over one client.
    modulePreload: false,
  },
});
