import { basename, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineProject } from 'vitest/config';

/** Workspace packages resolve to their TypeScript sources through this export condition. */
const conditions = ['@sluice/source', ...defaultServerConditions];

/**
 * The one vitest project configuration every package extends: tests next to the code, workspace
 * packages resolved to their TypeScript sources (the `@sluice/source` export condition).
 */
export function project(
  configUrl: string,
  overrides: { testTimeout?: number; fileParallelism?: boolean } = {},
) {
  const dir = dirname(fileURLToPath(configUrl));
  return defineProject({
    resolve: { conditions },
    ssr: { resolve: { conditions } },
    test: {
      name: basename(dir),
      root: dir,
      include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
      environment: 'node',
      testTimeout: overrides.testTimeout ?? 30_000,
      hookTimeout: 60_000,
      fileParallelism: overrides.fileParallelism ?? true,
    },
  });
}
