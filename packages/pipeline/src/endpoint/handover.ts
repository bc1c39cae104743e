import type { Logger, PipelineCheckpoint, WritableCacheCatalog } from '@sluice/core';
import type { SwitchHandover } from '../sinks/cache.js';
import { compareLsn } from '../sources/replication/lsn.js';
import { ReplicationPositionSchema } from '../sources/replication/position.js';
import type { ServingFollower } from './follower.js';

/**
 * Where the hand-over of a switch to one generation is (docs/generations.md § The switch hands over at a position):
 * - `idle`: no switch asked for yet;
 * - `catching-up`: the generation switched to is behind what the serving one has committed (it keeps following, and
 *   so does the serving one); asked again at its next commit;
 * - `paused`: it caught up with where the serving one was, so the serving one's follower was paused at a commit
 *   boundary; its last committed position is the `barrier` the switched-to generation must reach — within
 *   `pauseMs`, else the serving one follows again (`catching-up`);
 * - `handed-over`: the alias may move (the serving generation commits nothing past what the other has committed).
 */
export const HandoverPhase = {
  idle: 'idle',
  catchingUp: 'catching-up',
  paused: 'paused',
  handedOver: 'handed-over',
} as const;
export type HandoverPhase = (typeof HandoverPhase)[keyof typeof HandoverPhase];

/**
 * What a hand-over needs of the serving generation's follower (follower.ts): where it last committed, and stopping and
 * restarting its commits.
 */
export type HandoverFollower = Pick<ServingFollower, 'lastCommitLsn' | 'pause' | 'resume'>;

export interface HandoverOptions {
  endpoint: string;
  /** The handle of the endpoint's source: whose LSN the two generations' checkpoints are compared by. */
  sourceHandle: string;
  caches: WritableCacheCatalog;
  /** The follower of the serving generation (null: a source whose serving generation stands while a green builds). */
  follower: HandoverFollower | null;
  logger: Logger;
  /** The longest the serving generation stays paused for one attempt to switch. */
  pauseMs: number;
}

/**
 * The hand-over of the switches of one endpoint, as its cache sinks ask for it: one {@link SwitchHandover} per
 * generation that may be switched to. The alias moves to a generation only once it has committed at least the LSN
 * the serving generation last committed, and the serving generation commits nothing past that in between: so the
 * `sluice-position` readers get, and a change feed's `commit` positions, never go back across a rebuild, a schema
 * change, a restart's rebuild or a promote. Positions that are not LSNs (files, JetStream, polled tables) are not
 * compared: those switch as soon as the gates allow.
 *
 * @example
 * ```ts
 * const handover = switchHandover({ endpoint: 'items', sourceHandle: 'items.source', caches, follower, logger, pauseMs: 10_000 });
 * createCacheSink({ …, handover: handover(green.name) });
 * ```
 */
export function switchHandover(options: HandoverOptions): (generation: string) => SwitchHandover {
  const { endpoint, caches, follower, logger } = options;
  const lsnOf = (checkpoint: PipelineCheckpoint | null | undefined): string | null => {
    const parsed = ReplicationPositionSchema.safeParse(checkpoint?.positions[options.sourceHandle]);
    return parsed.success ? parsed.data.lsn : null;
  };
  /** What `serving` has committed, as its cache says (what readers get). */
  const committedLsn = async (serving: string) => lsnOf((await caches.info(serving))?.checkpoint);

  return (generation) => {
    let phase: HandoverPhase = HandoverPhase.idle;
    /** The serving generation handing over, while `paused`. */
    let pausedServing: string | null = null;
    let barrier: string | null = null;
    /** The serving generation's LSN this generation was last compared with (the barrier while paused). */
    let target: string | null = null;
    let timer: NodeJS.Timeout | null = null;

    const clearTimer = () => {
      if (timer !== null) clearTimeout(timer);
      timer = null;
    };
    /** The paused serving generation follows its source again: the switch is tried again once caught up. */
    const resumeServing = async () => {
      clearTimer();
      const serving = pausedServing;
      pausedServing = null;
      barrier = null;
      if (serving !== null) await follower?.resume(serving);
    };

    return {
      waitMs: options.pauseMs,
      get target() {
        return target === null ? null : `${options.sourceHandle}=${target}`;
      },
      async ready(committed) {
        const serving = caches.resolveAlias(endpoint)?.cache ?? null;
        if (serving === null || serving === generation) return true;
        const lsn = lsnOf(committed);
        // Not an LSN (or nothing committed yet): nothing a reader compares, nothing to wait for.
        if (lsn === null) return true;
        if (phase === HandoverPhase.handedOver) return true;
        if (phase === HandoverPhase.paused) {
          if (pausedServing === serving && barrier !== null && compareLsn(lsn, barrier) < 0) return false;
          clearTimer();
          phase = HandoverPhase.handedOver;
          logger.info(
            { endpoint, from: serving, to: generation, lsn, barrier },
            'switch: the generation switched to reached the serving generation’s last position',
          );
          return true;
        }
        // Where the serving generation is now (its follower's last commit, else its cache's).
        const now = follower?.lastCommitLsn(serving) ?? (await committedLsn(serving));
        target = now;
        if (now !== null && compareLsn(lsn, now) < 0) {
          if (phase === HandoverPhase.idle)
            logger.info(
              { endpoint, from: serving, to: generation, lsn, serving: now },
              'switch waits: the generation switched to is behind the serving one; the alias moves once it caught up',
            );
          phase = HandoverPhase.catchingUp;
          return false;
        }
        // Caught up with where it was: stop it there, and take its last position as what must be reached.
        await follower?.pause(serving, `handing the alias over to ${generation}`);
        const last = await committedLsn(serving);
        target = last ?? target;
        if (last === null || compareLsn(lsn, last) >= 0) {
          phase = HandoverPhase.handedOver;
          return true;
        }
        phase = HandoverPhase.paused;
        pausedServing = serving;
        barrier = last;
        logger.info(
          { endpoint, from: serving, to: generation, lsn, barrier: last, waitMs: options.pauseMs },
          'switch: the serving generation paused at its last commit; the alias moves once the other reaches it',
        );
        timer = setTimeout(() => {
          timer = null;
          if (phase !== HandoverPhase.paused) return;
          phase = HandoverPhase.catchingUp;
          logger.warn(
            { endpoint, from: serving, to: generation, barrier: last, waitMs: options.pauseMs },
            'switch put off: the generation switched to did not reach the serving one’s last position in time; the serving one follows again and the switch is tried once caught up',
          );
          void resumeServing().catch((err: unknown) =>
            logger.error({ endpoint, err }, 'the paused serving generation could not follow again'),
          );
        }, options.pauseMs);
        timer.unref?.();
        return false;
      },
      async settle(moved) {
        const was = phase;
        phase = HandoverPhase.idle;
        // Moved: the endpoint stops the old serving generation's follower (it is retired now).
        if (moved) {
          clearTimer();
          pausedServing = null;
          barrier = null;
          return;
        }
        if (was === HandoverPhase.paused) await resumeServing();
        else if (was === HandoverPhase.handedOver) {
          // Paused and then given up before the move (a promote that timed out, a run stopped).
          const serving = caches.resolveAlias(endpoint)?.cache ?? null;
          if (serving !== null && serving !== generation) await follower?.resume(serving);
        }
      },
    };
  };
}
