/**
 * Which replication slot each generation of an endpoint reads (docs/generations.md). A slot feeds one reader, and
 * while a green builds or is held the serving generation keeps following its source too: two generations are fed
 * at once, so an endpoint has two slot names — `primary` (`sluice_<node>_<endpoint>_source`, the one a single
 * generation has always used) and `alternate` (the same with `_b`). A green takes the name the serving generation
 * does not use; a generation that committed keeps the slot its checkpoint names (stable across restarts).
 */
import type { PipelineCheckpoint } from '@sluice/core';
import { ReplicationPositionSchema } from '../sources/replication/position.js';
import { defaultReplicationName } from '../sources/replication/setup.js';

/** The two slot (and publication) names of an endpoint's replication source. */
export interface EndpointSlotNames {
  primary: string;
  alternate: string;
}

/**
 * The slot names of the endpoint source `handle` on node `nodeId` (each also its publication's name).
 *
 * @example
 * ```ts
 * endpointSlotNames('h1', 'items.source'); // { primary: 'sluice_h1_items_source', alternate: 'sluice_h1_items_source_b' }
 * ```
 */
export function endpointSlotNames(nodeId: string, handle: string): EndpointSlotNames {
  return {
    primary: defaultReplicationName(nodeId, handle),
    alternate: defaultReplicationName(nodeId, `${handle}_b`),
  };
}

/** The slot `checkpoint` says source `handle` read, or null (no checkpoint, or not a replication position). */
export function checkpointSlot(
  checkpoint: PipelineCheckpoint | null | undefined,
  handle: string,
): string | null {
  const parsed = ReplicationPositionSchema.safeParse(checkpoint?.positions[handle]);
  return parsed.success ? parsed.data.slot : null;
}

/** A generation as the slot choice sees it: its name and its own commit checkpoint. */
export interface GenerationCheckpoint {
  name: string;
  checkpoint: PipelineCheckpoint | null;
}

/**
 * The slot generation `generation` reads: the one of the endpoint's names its own checkpoint names; else, beside a
 * serving generation, the name that one does not use; else the primary name.
 *
 * @example
 * ```ts
 * slotOfGeneration(names, 'items.source', { name: green, checkpoint: null }, { name: blue, checkpoint });
 * ```
 */
export function slotOfGeneration(
  names: EndpointSlotNames,
  handle: string,
  generation: GenerationCheckpoint,
  serving: GenerationCheckpoint | null,
): string {
  const own = checkpointSlot(generation.checkpoint, handle);
  if (own === names.primary || own === names.alternate) return own;
  if (serving === null || serving.name === generation.name) return names.primary;
  const servingSlot = slotOfGeneration(names, handle, serving, null);
  return servingSlot === names.primary ? names.alternate : names.primary;
}

/**
 * The endpoint's slot names no retained generation needs any more: not named by the checkpoint of a generation the
 * catalog still keeps (serving, building, held, or retired but not yet collected — a rollback may continue it)
 * and not read by a source open now. Dropping them is the sweeper's job (they hold WAL for nobody).
 */
export function unneededSlots(
  names: EndpointSlotNames,
  handle: string,
  retained: readonly GenerationCheckpoint[],
  open: ReadonlySet<string>,
): string[] {
  const needed = new Set(retained.map((g) => checkpointSlot(g.checkpoint, handle)));
  return [names.primary, names.alternate].filter((slot) => !needed.has(slot) && !open.has(slot));
}
