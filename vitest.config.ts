import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: ['packages/*/vitest.config.ts', 'apps/*/vitest.config.ts'],
    // Two cores on CI machines: multi-process tests are heavy, keep the pool modest.
    maxWorkers: 2,
  },
});
