import { type CacheInfo, GenerationState, type GenerationView, type SwitchView } from '@sluice/core';

export { GenerationState, type GenerationView, type SwitchView };

/**
 * The operator's view of an endpoint's generations, newest first: the alias target serves; a finished green
 * held by a gate is held; the pipeline's current green is building; everything else (replaced, rolled back from,
 * or an abandoned build) is retired until garbage collection removes it.
 *
 * @example
 * ```ts
 * const views = generationsView(await caches.list(), { serving: 'items-01…', building: null });
 * ```
 */
export function generationsView(
  infos: readonly CacheInfo[],
  current: { serving: string | null; building: string | null },
): GenerationView[] {
  const stateOf = (info: CacheInfo): GenerationState => {
    if (info.name === current.serving) return 'serving';
    if (info.state === 'building' && info.notes.held) return 'held';
    if (info.state === 'building' && info.name === current.building) return 'building';
    return 'retired';
  };
  return [...infos]
    .sort((a, b) =>
      a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : b.name.localeCompare(a.name),
    )
    .map((info) => ({
      name: info.name,
      state: stateOf(info),
      createdAt: info.createdAt,
      snapshotDoneAt: info.notes.snapshotDoneAt ?? null,
      switchedAt: info.switchedAt,
      retiredAt: info.retiredAt,
      records: info.recordCount,
      checkpoint: info.checkpoint,
      decision: info.notes.decision?.decision ?? null,
      // Why it exists, as operators ask: held, else why it was built (kept across restarts), else the last decision.
      reason: info.notes.held?.reason ?? info.notes.built ?? info.notes.decision?.reason ?? null,
      cause: info.notes.cause ?? null,
    }));
}
