/**
 * Holds the owner of a file transfer right at its fenced `finishing` step (docs/fencing.md § Finishing holds the
 * record): the pair's owner is cut off from NATS (so it takes no finishing shortcut and a peer asking about it hears
 * "nobody"), and its finishing write waits in the store, holding the record's row, until the test releases
 * {@link HOLD_FINISHING}. Used by finishing-terminate.test.ts, finishing-takeover.test.ts and
 * console-transfer-finishing.test.ts.
 */
import { join } from 'node:path';
import { waitFor } from '@sluice/testkit';
import { expect } from 'vitest';
import { call, fileTransfer, writeRecords } from './helpers.js';
import type { PartitionedPair } from './partitioned-owner.js';
import { NOT_A_HEARTBEAT, type StoreGates } from './store-gates.js';

/** Not a multiple of the commit interval (50): the final save is the run's last step before the sink publishes. */
export const RECORDS = 525;
/** Advisory lock key the test holds: the owner's finishing write waits on it. */
export const HOLD_FINISHING = 11;
/** Every update statement of the store waits on this one at its start, before it locks any row. */
export const HOLD_UPDATES = 15;
/**
 * The owner's finishing write waits for HOLD_FINISHING, holding the record's row: an update of the record that read
 * everything which changes neither its state, epoch nor checkpoint and is not a heartbeat (which changes the lease
 * only, too).
 */
export const FINISHING_WRITE_WAITS = `IF NEW.state = OLD.state AND NEW.epoch = OLD.epoch
    AND NEW.checkpoint IS NOT DISTINCT FROM OLD.checkpoint
    AND jsonb_path_exists(NEW.checkpoint::jsonb, '$.** ? (@.read == ${RECORDS})')
    AND (SELECT ${NOT_A_HEARTBEAT} FROM (SELECT current_query() AS query) AS statement) THEN
  PERFORM pg_advisory_xact_lock_shared(${HOLD_FINISHING});
END IF;`;

/**
 * Submits transfer `id` (file of {@link RECORDS} records → `out`, 200 records/s) to the pair's owner, waits until it
 * is under way, then cuts the owner off from NATS and waits until its finishing write is held by the gates (installed
 * with `rowHolds: FINISHING_WRITE_WAITS`, {@link HOLD_FINISHING} held).
 *
 * @example
 * ```ts
 * await using gates = await openStoreGates(storeDb, { rowHolds: FINISHING_WRITE_WAITS, updateGate: HOLD_UPDATES });
 * await gates.hold(HOLD_FINISHING);
 * await partitionedAtFinishing(pair, gates, 'finish-race', join(pair.files, 'out.jsonl'));
 * ```
 */
export async function partitionedAtFinishing(
  pair: PartitionedPair,
  gates: StoreGates,
  id: string,
  out: string,
): Promise<void> {
  const { owner, proxy, files } = pair;
  const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
  expect((await call(`${owner.url}/v1/transfers`, { json: fileTransfer(id, source, out, 200) })).status).toBe(
    201,
  );
  await waitFor(
    async () => ((await call(`${owner.url}/v1/transfers/${id}`)).body.progress?.recordsRead ?? 0) > 100,
    { timeoutMs: 30_000, what: 'the transfer to be under way' },
  );
  await proxy.cut();
  await waitFor(async () => (await call(`${owner.url}/readyz`)).status === 503, {
    timeoutMs: 20_000,
    what: 'the owner to see its backplane down',
  });
  await waitFor(() => gates.waitingOnAdvisory(HOLD_FINISHING), {
    timeoutMs: 30_000,
    intervalMs: 10,
    what: "the owner's finishing write to wait",
  });
}
