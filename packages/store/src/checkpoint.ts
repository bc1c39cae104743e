import type { CheckpointPort, DataPlaneStore } from '@sluice/core';

/** What the owner of a run adds to the store's fencing (the app-server's coordinator wires its run state here). */
export interface CheckpointPortOptions {
  /** Lease renewed by every fenced write. */
  leaseMs?: number;
  /** The checkpoint already read with the claimed record: `load` answers it without a store round trip. */
  initial?: unknown | null;
  /**
   * Called before every step; throws to refuse it (a run that was fenced, lost its lease or is being stopped).
   * `finishing` calls it again after its store confirmation, so a stop that arrived meanwhile — or a lease that ran
   * out while the process was paused around that confirmation — still refuses.
   */
  refuse?: (step: 'save' | 'finishing') => void;
  /** Called after each fenced write with the instant (`performance.now()`) it started: the lease runs from there. */
  onLeaseRenewed?: (startedAt: number) => void;
  /**
   * Asked by `finishing` when the last step was a successful `save`: true lets it skip the store confirmation
   * (that save just confirmed the epoch, the lease it renewed is still fresh enough, and no other node can have
   * taken the transfer since without this one's consent: the app-server also requires that its backplane
   * responder stayed reachable, `Backplane.reachableSince`, since a peer told "nobody" takes over at once).
   */
  recentlyConfirmed?: () => boolean;
  /** The port's {@link CheckpointPort.mayWrite}: whether the run may still write (its owner's lease and stop state). */
  mayWrite?: () => boolean;
}

/**
 * The {@link CheckpointPort} of one run of a transfer: loads the checkpoint from its record and saves it
 * fenced by `epoch` (renewing the lease when `leaseMs` is given), so a node that lost the transfer cannot
 * overwrite the new owner's progress (`STALE_EPOCH`). `finishing` is the store's fenced finishing step
 * (`DataPlaneStore.finishing`): it confirms the epoch and keeps takeovers on a "nobody" off the record.
 *
 * @example
 * ```ts
 * const checkpoint = createCheckpointPort(store, record.id, record.epoch, { leaseMs: 30_000, initial: record.checkpoint });
 * await runTransfer(record.request, { checkpoint, connections, signal });
 * ```
 */
export function createCheckpointPort(
  store: DataPlaneStore,
  id: string,
  epoch: number,
  options: CheckpointPortOptions = {},
): CheckpointPort {
  const { leaseMs, refuse, onLeaseRenewed, recentlyConfirmed } = options;
  let last: unknown | null | undefined = options.initial;
  // True from a successful save until the next step starts: the sink's last commit was followed by a fenced write.
  let confirmedAfterLastSave = false;
  /** A fenced write that renews the lease: the lease runs from the instant it started. */
  const fencedWrite = async (write: () => Promise<void>) => {
    const startedAt = performance.now();
    await write();
    onLeaseRenewed?.(startedAt);
  };
  return {
    epoch,
    ...(options.mayWrite !== undefined ? { mayWrite: options.mayWrite } : {}),
    async load() {
      // Without an initial checkpoint every load reads the record (another run may have saved since).
      if (options.initial === undefined) last = (await store.get(id))?.checkpoint ?? null;
      return last;
    },
    async save(checkpoint) {
      refuse?.('save');
      confirmedAfterLastSave = false;
      await fencedWrite(() => store.saveCheckpoint(id, epoch, checkpoint, leaseMs));
      last = checkpoint;
      confirmedAfterLastSave = true;
    },
    async finishing() {
      // Past this point a sink publishes what cannot be taken back: only the current owner may.
      refuse?.('finishing');
      if (confirmedAfterLastSave && recentlyConfirmed?.()) return;
      // It fails with STALE_EPOCH once another owner took over.
      await fencedWrite(() => store.finishing(id, epoch, leaseMs));
      refuse?.('finishing');
    },
  };
}
