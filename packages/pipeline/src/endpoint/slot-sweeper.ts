import { type ErrorCode, type Logger, SluiceError, type WritableCacheCatalog } from '@sluice/core';
import { dropReplicationSlot, listReplicationSlots } from '../sources/replication/slots.js';
import { unneededSlots } from './generation-slots.js';
import type { EndpointShape } from './shape.js';

/** A running sweeper: {@link SlotSweeper.sweep} on demand, and on its timer until disposed. */
export interface SlotSweeper extends AsyncDisposable {
  /** Drops the endpoint's slots no retained generation needs (a pass already under way is joined). */
  sweep(): Promise<void>;
  stop(): Promise<void>;
}

/** Codes of a drop refused because the slot is not to be dropped after all (read now, gone, not Sluice's). */
const LEFT_ALONE: readonly ErrorCode[] = ['UNKNOWN_SLOT', 'SLOT_ACTIVE', 'SLOT_NOT_OWNED'];

/**
 * Drops the replication slots of an endpoint's generations that are gone: a slot lives as long as the generation
 * whose checkpoint names it is retained (serving, building, held, or retired until garbage collection — a rollback
 * continues it from that slot), and a slot nobody reads holds WAL on the source until the disk fills. Runs every
 * `everyMs` (and whenever asked: after a switch) for an endpoint with a slot per generation; never touches a slot a
 * branch reads now, one Sluice did not create, or one a walsender streams.
 *
 * @example
 * ```ts
 * await using sweeper = startSlotSweeper({ shape, caches, logger, everyMs: 60_000 });
 * await sweeper.sweep();
 * ```
 */
export function startSlotSweeper(options: {
  shape: EndpointShape;
  caches: WritableCacheCatalog;
  logger: Logger;
  everyMs: number;
}): SlotSweeper {
  const { shape, caches, logger } = options;
  const names = shape.slotNames;
  const handle = `${shape.name}.source`;
  let running: Promise<void> | null = null;
  let stopped = false;

  const pass = async (): Promise<void> => {
    if (names === null || stopped) return;
    // Slots first, then what needs them: a generation created meanwhile is seen, so its new slot is kept.
    const present = new Set((await listReplicationSlots(names.url)).map((slot) => slot.slot));
    const retained = (await caches.list())
      .filter((info) => info.endpoint === shape.name)
      .map((info) => ({ name: info.name, checkpoint: info.checkpoint }));
    for (const slot of unneededSlots(names, handle, retained, shape.openSlots())) {
      if (!present.has(slot) || shape.openSlots().has(slot) || stopped) continue;
      try {
        const mark = await dropReplicationSlot(names.url, slot);
        logger.info(
          { endpoint: shape.name, slot, publication: mark.publication },
          'dropped the replication slot of a generation no longer retained',
        );
      } catch (err) {
        if (!LEFT_ALONE.some((code) => SluiceError.hasCode(err, code))) throw err;
      }
    }
  };

  const sweep = (): Promise<void> => {
    running ??= pass()
      .catch((err: unknown) =>
        logger.warn(
          { endpoint: shape.name, err },
          'cannot drop the replication slots of retired generations',
        ),
      )
      .finally(() => {
        running = null;
      });
    return running;
  };

  const timer = names === null ? null : setInterval(() => void sweep(), options.everyMs);
  timer?.unref();
  const stop = async () => {
    stopped = true;
    if (timer !== null) clearInterval(timer);
    await running;
  };
  return { sweep, stop, [Symbol.asyncDispose]: stop };
}
