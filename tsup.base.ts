import { defineConfig, type Options } from 'tsup';

/**
 * The one tsup configuration every package extends: ESM + CJS + .d.ts from `src/index.ts`
 * (plus any extra entries, e.g. an app's `bin`).
 */
export function library(overrides: Partial<Options> = {}) {
  return defineConfig({
    entry: ['src/index.ts'],
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'node20',
    platform: 'node',
    splitting: false,
    treeshake: true,
    ...overrides,
  });
}
