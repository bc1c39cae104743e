import {
  CannotResumeError,
  GenerationNotHeldError,
  GenerationNotServingError,
  NothingToPromoteError,
  NothingToRollBackError,
  type SwitchOutcome,
  type WritableCache,
} from '@sluice/core';
import { announceRedirect } from '../sinks/cache.js';
import { PendingSends } from '../sinks/pending-sends.js';
import { assessGeneration, endpointSink, generationSlot, type LaunchContext } from './launch.js';
import { generationSchema } from './schema-resolution.js';
import type { EndpointSupervisor } from './supervisor.js';

/** The operator's switches of one endpoint: promote a held generation, roll back to an earlier one. */
export interface Steering {
  /** `generation`: the one the operator saw held; another held since (or none) is refused, nothing moves. */
  promote(generation?: string): Promise<SwitchOutcome>;
  /** `from`: the generation the operator saw serving; another serving now is refused, nothing moves. */
  rollback(to?: string, from?: string): Promise<SwitchOutcome>;
  /**
   * Waits (up to `timeoutMs`) for the `AliasRedirected` of rollbacks still on their way to the backplane; resolves with
   * how many are left. Called when the endpoint stops.
   */
  settleSends(timeoutMs: number): Promise<number>;
}

/**
 * Promote and rollback of an endpoint whose runs `supervisor` keeps. Both are idempotent: repeating the last one
 * answers `changed: false`.
 *
 * @example
 * ```ts
 * const steering = endpointSteering(launchContext, supervisor, wakeWaiters);
 * await steering.rollback(); // back to the generation that served before
 * ```
 */
export function endpointSteering(
  lc: LaunchContext,
  supervisor: EndpointSupervisor,
  onSwitched: () => void,
): Steering {
  const { caches, shape, logger } = lc;
  const name = shape.name;
  const servingCache = () => caches.resolveAlias(name)?.cache ?? null;
  /** Rollbacks' `AliasRedirected` on their way to the backplane: the rolled-back generation does not wait for them. */
  const sends = new PendingSends();

  /** The generation held for promote now (a green whose run is retried counts), or null. */
  const heldNow = (): string | null => {
    const fed = supervisor.fed;
    return fed && !fed.sink.redirected && fed.sink.held !== null ? fed.cache.name : null;
  };

  const promote = async (generation?: string): Promise<SwitchOutcome> => {
    supervisor.assertNotStopped();
    const held = heldNow();
    // Named, only that one moves: the operator confirmed what they saw, and another may be held since.
    if (generation !== undefined && held !== null && held !== generation)
      throw new GenerationNotHeldError(name, generation, held);
    const run = supervisor.run;
    if (run && !run.sink.redirected && run.sink.held !== null) {
      const { from, to } = await run.sink.promote();
      return { endpoint: name, from, to, cause: 'promote', changed: true };
    }
    const fed = supervisor.fed;
    if (run === null && fed && !fed.sink.redirected && fed.sink.held !== null)
      return promoteWhileRetrying(generation);
    const last = caches.history(name)[0];
    if (last?.cause === 'promote' && last.to === servingCache() && (generation ?? last.to) === last.to)
      return { endpoint: name, from: last.from, to: last.to, cause: 'promote', changed: false };
    if (generation !== undefined) throw new GenerationNotHeldError(name, generation, held);
    throw new NothingToPromoteError(name);
  };

  /**
   * Promotes the held green while the run that fed it is being retried (its source down): the retries are
   * stopped while the alias moves — under the same hand-over as any switch (it moves only if the green has committed
   * at least what the serving generation has, which no run changes meanwhile) — then go on, planning from the alias
   * table: the next run continues the promoted generation in place. The switch needs no source, only the alias table.
   */
  const promoteWhileRetrying = async (generation?: string): Promise<SwitchOutcome> => {
    await supervisor.halt();
    try {
      // Asked again once halted: a retry may have started a run meanwhile (ended by the halt, its sink the one now).
      const held = supervisor.fed?.sink;
      if (!held || held.redirected || held.held === null)
        throw generation === undefined
          ? new NothingToPromoteError(name)
          : new GenerationNotHeldError(name, generation, null);
      if (generation !== undefined && supervisor.fed!.cache.name !== generation)
        throw new GenerationNotHeldError(name, generation, supervisor.fed!.cache.name);
      const { from, to } = await held.promote();
      return { endpoint: name, from, to, cause: 'promote', changed: true };
    } finally {
      supervisor.retryAgain();
    }
  };

  /**
   * Refuses a rollback confirmed from a picture the endpoint moved on from: `from` named, another serving now. Asked
   * before the target is assessed and again once the supervisor is halted, right before the alias moves — a rebuild's
   * own switch may land in between, and nothing else moves the alias once the supervisor is halted.
   */
  const assertServing = (from: string | undefined) => {
    const serving = servingCache();
    if (from !== undefined && serving !== from) throw new GenerationNotServingError(name, from, serving);
  };

  const rollback = async (to?: string, from?: string): Promise<SwitchOutcome> => {
    supervisor.assertNotStopped();
    const serving = servingCache();
    const last = caches.history(name)[0];
    // A repeat of the rollback just done (`from`, when named, the one it moved from): answered, nothing moves.
    if (
      to === undefined &&
      last?.cause === 'rollback' &&
      last.to === serving &&
      (from ?? last.from) === last.from
    )
      return { endpoint: name, from: last.from, to: last.to, cause: 'rollback', changed: false };
    if (to !== undefined && to === serving)
      return { endpoint: name, from: serving, to, cause: 'rollback', changed: false };
    assertServing(from);
    const targetName = to ?? (last?.to === serving ? last?.from : null) ?? null;
    if (targetName === null) throw new NothingToRollBackError(name, 'no earlier generation served it');
    const info = await caches.info(targetName);
    if (!info || info.endpoint !== name || info.switchedAt === null)
      throw new NothingToRollBackError(
        name,
        `${targetName} is not a retained generation that served it (it may have been garbage-collected)`,
      );
    // Decide on a branch and sink of its own: the running generation is untouched until the decision is made.
    // The schema as a run of today's configuration would write it (configured fields, else the generation's own).
    const { schema, csvFields } = generationSchema(shape, info.schema);
    // Its own slot (the one its checkpoint names), which it may still hold when it kept following until retired.
    const slot = generationSlot(lc, [info], serving)(targetName);
    const candidate = shape.branch(csvFields, false, schema.fields, slot);
    let cache: WritableCache | null = null;
    let halted = false;
    let adopted = false;
    try {
      const assessed = await assessGeneration(lc, targetName, schema, candidate, true);
      cache = assessed.cache;
      if (assessed.assessment.verdict === 'schema-changed')
        throw new CannotResumeError(name, targetName, 'it was built for another schema, key or index set');
      if (assessed.assessment.verdict !== 'resumable' || !cache || !assessed.plan)
        throw new CannotResumeError(name, targetName, assessed.assessment.reason);
      const restart = assessed.plan;
      halted = true;
      await supervisor.halt();
      assertServing(from);
      // The greens the rollback abandons (building or held: nothing will feed them) are retired by the move itself, in
      // its transaction: a process dying right after the alias moved would otherwise restart, find the newest of them
      // an interrupted rebuild, resume it and switch to it — undoing the rollback without a word.
      const abandoned = (await caches.list())
        .filter((g) => g.endpoint === name && g.state === 'building' && g.name !== targetName)
        .map((g) => g.name);
      const { from: previous, version } = await caches.redirect(name, targetName, {
        cause: 'rollback',
        retire: abandoned,
      });
      // Not awaited: the supervisor is halted until the rolled-back generation runs again, and a hung NATS must not
      // keep it from following its source (the backplane keeps the redirect; api-servers also follow the alias table).
      sends.start(
        () =>
          announceRedirect(lc.events, logger, {
            alias: name,
            from: previous,
            to: targetName,
            version,
            checkpoint: restart.checkpoint,
            cause: 'rollback',
          }),
        (err) => logger.warn({ err, endpoint: name }, 'could not publish AliasRedirected'),
      );
      const rolledBack = cache;
      cache = null;
      adopted = true;
      await supervisor.resume({
        branch: candidate,
        cache: rolledBack,
        sink: endpointSink(lc, rolledBack, schema, candidate),
        schema,
        cause: null,
        plan: { ...restart, reason: `rolled back to ${targetName}: ${restart.reason}` },
        // The alias already points at it: the generation fed is the serving one.
        standing: null,
      });
      onSwitched();
      return { endpoint: name, from: previous, to: targetName, cause: 'rollback', changed: true };
    } catch (err) {
      if (cache) await cache.close().catch(() => {});
      if (!adopted) await candidate.source.close().catch(() => {});
      // Refused before anything moved (the endpoint switched while the target was assessed): it goes on as it was,
      // planned from the alias table — nothing failed.
      if (halted && err instanceof GenerationNotServingError) await supervisor.launch(false).catch(() => {});
      // Stopped for the rollback, which then failed: the supervisor plans from the alias table again.
      else if (halted) supervisor.resumeAfterFailure(err);
      throw err;
    }
  };

  return { promote, rollback, settleSends: (timeoutMs) => sends.settle(timeoutMs) };
}
