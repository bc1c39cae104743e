import { z } from 'zod';

/** `store`: where transfer records live; `sqlite:<path>` (embedded, one node) or a PostgreSQL URL. */
export const StoreConfigSchema = z
  .string()
  .min(1)
  .refine((s) => s.startsWith('sqlite:') || s.startsWith('postgres://') || s.startsWith('postgresql://'), {
    message: 'must be "sqlite:<path>" or a postgres:// URL',
  })
  .default('sqlite:./.sluice/store.db');

/** Whether a `store` value names the embedded SQLite store. */
export function isSqliteStore(store: string): boolean {
  return store.startsWith('sqlite:');
}
