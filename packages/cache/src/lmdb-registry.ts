import type { RootDatabase } from 'lmdb';
import * as lmdb from 'lmdb';

/** A store as lmdb-js registers it: `env` is the native environment it was opened in. */
interface RegisteredStore {
  readonly env?: unknown;
}

/**
 * lmdb-js's module-wide registry of every store opened in this process (exported but not declared in its types).
 * It adds each store at open and never removes one at close.
 */
const registry = (lmdb as unknown as { allDbs?: Map<string, RegisteredStore> }).allDbs;

/**
 * Forgets every store of the closed environment `root` from lmdb-js's registry. Without this, every generation a
 * long-running process ever opened stays reachable there — its stores, encoders and buffers — since the registry
 * is keyed by the environment directory's basename, unique per generation: memory grows with every switch.
 */
export function forgetClosedEnv(root: RootDatabase): void {
  if (!registry) return;
  const env = (root as unknown as RegisteredStore).env;
  for (const [key, store] of registry)
    if (store === root || (env !== undefined && store.env === env)) registry.delete(key);
}
