import type { CheckpointPort, DataPlaneStore } from '@sluice/core';

/**
 * The {@link CheckpointPort} of one run of a transfer: loads the checkpoint from its record and saves it
 * fenced by `epoch` (renewing the lease when `leaseMs` is given), so a node that lost the transfer cannot
 * overwrite the new owner's progress (`STALE_EPOCH`).
 *
 * @example
 * ```ts
 * const checkpoint = createCheckpointPort(store, record.id, record.epoch, 30_000);
 * await runTransfer(record.request, { checkpoint, connections, signal });
 * ```
 */
export function createCheckpointPort(
  store: DataPlaneStore,
  id: string,
  epoch: number,
  leaseMs?: number,
): CheckpointPort {
  let last: unknown | null | undefined;
  return {
    epoch,
    async load() {
      const record = await store.get(id);
      last = record?.checkpoint ?? null;
      return last;
    },
    async save(checkpoint) {
      await store.saveCheckpoint(id, epoch, checkpoint, leaseMs);
      last = checkpoint;
    },
    async finishing() {
      // A fenced write of what is already there: it fails with STALE_EPOCH once another owner took over.
      if (last === undefined) last = (await store.get(id))?.checkpoint ?? null;
      await store.saveCheckpoint(id, epoch, last, leaseMs);
    },
  };
}
