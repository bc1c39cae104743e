// Beside helpers.ts rather than in it: this one registers vitest hooks, and helpers.ts is also loaded by the
// benchmark (bench/run.ts), which runs outside vitest.
import {
  type LogicalPostgresHandle,
  type LogicalPostgresOptions,
  startLogicalPostgres,
} from '@sluice/testkit';
import { afterAll, beforeAll } from 'vitest';

/**
 * One PostgreSQL with `wal_level=logical` for the tests of a file (with `options`' settings): started before them,
 * stopped after them. Call it at the top level of the file; the function it returns gives the running server inside
 * a test.
 *
 * @example
 * ```ts
 * const postgres = logicalPostgresPerFile();
 * it('…', async () => { const url = await postgres().createDatabase('lag'); });
 * ```
 */
export function logicalPostgresPerFile(options: LogicalPostgresOptions = {}): () => LogicalPostgresHandle {
  let server: LogicalPostgresHandle | undefined;
  beforeAll(async () => {
    server = await startLogicalPostgres(options);
  });
  afterAll(async () => {
    await server?.[Symbol.asyncDispose]();
  });
  return () => {
    if (!server) throw new Error('the logical PostgreSQL of this file is not started (call outside a test?)');
    return server;
  };
}
