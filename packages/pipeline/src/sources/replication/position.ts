/**
 * The checkpointed position of a replication source, as it travels in pipeline checkpoints (validated whenever one
 * is read back: a checkpoint is data from outside this process).
 */
import { z } from 'zod';
import { isLsn } from './lsn.js';

const Lsn = z.string().refine(isLsn, 'not an LSN');

/**
 * The checkpointed position of a replication source. `lsn` is where the stream continues: the slot's consistent
 * point until the first transaction, then the end of the last transaction committed with the cache. In `snapshot`
 * the keyset snapshot has read up to `lastKey`; in `catch-up` a snapshot resumed in a later session (its exported
 * snapshot died with the process) is complete only once the stream has passed `catchUp`.
 */
export const ReplicationPositionSchema = z.object({
  capture: z.literal('replication'),
  slot: z.string(),
  publication: z.string(),
  phase: z.enum(['snapshot', 'catch-up', 'stream']),
  lsn: Lsn,
  lastKey: z.array(z.string()).nullable(),
  catchUp: Lsn.nullable(),
  /**
   * The table's columns the generation knows: name, type OID, `attnum` and the version of its catalog row (absent in
   * checkpoints written before they were recorded), so a column dropped and added again under the same name and type,
   * or retyped to its own type with new values, is told apart (setup.ts).
   */
  columns: z.array(
    z.tuple([z.string(), z.number().int(), z.number().int().optional(), z.string().optional()]),
  ),
  /**
   * The table's storage (`relfilenode`s) as the generation last checked its columns against the catalog: a rewrite
   * since, with a column altered since, may have given every row a new value (setup.ts `rewrittenColumns`). Absent
   * in checkpoints written before it was recorded.
   */
  storage: z.string().optional(),
  /**
   * The enum labels the table's columns hold as the generation last checked them (label OID, type, label): a label
   * renamed since gives every row holding it a new value without a change to stream (setup.ts `renamedLabels`).
   * Absent in checkpoints written before it was recorded.
   */
  labels: z.array(z.tuple([z.number().int(), z.string(), z.string()])).optional(),
  /**
   * The relation OID of the table the generation follows: a table dropped and recreated under the same name is
   * another table (a new generation). Absent in checkpoints written before it was recorded.
   */
  relation: z.number().int().optional(),
  /**
   * For a partitioned table, the relation OIDs of its leaf partitions when the generation was snapshotted: their
   * changes are the table's, and a partition attached or detached since (rows that came or went without a change
   * to stream) needs a new generation. Absent for a table that is not partitioned.
   */
  partitions: z.array(z.number().int()).optional(),
  /**
   * The table's membership in the publication as the generation's slot was created (publication-membership.ts): the
   * publication made again, or the table taken out of it and put back, since then is a gap in what the slot
   * delivers (a new generation). Absent in checkpoints written before it was recorded.
   */
  membership: z.string().optional(),
  read: z.number().int().nonnegative(),
});
export type ReplicationPosition = z.output<typeof ReplicationPositionSchema>;
