/**
 * The CDC chaos run's faults: what each does ({@link CdcFaultInjector.inject}) and the default schedule, one at a
 * time: each kind once per round in a shuffled order (so even a short run injects every kind), with a pause between
 * two. A fault ends only once it has healed (the process is back up, the rebuilt generation serves): the point is
 * what a fault does to the mirror, not a total outage. The overlapping schedule is cdc-overlap.ts's; the combined
 * kinds ({@link CDC_OVERLAP_FAULTS}) are injected only there.
 */
import type { LogicalPostgresHandle } from '@sluice/testkit';
import { sleep } from '@sluice/testkit';
import { ENDPOINT } from './cdc-readers.js';
import type { AccountsWriter } from './cdc-writer.js';
import type { ChaosNode, Cluster } from './cluster.js';
import { request } from './http.js';
import type { Rng } from './options.js';

/** Faults of one part each (the one-at-a-time schedule injects these). */
export const CDC_FAULTS = ['app-kill', 'app-pause', 'postgres-restart', 'api-kill', 'rebuild'] as const;
/**
 * Faults that combine two on purpose (`--overlap`): the app-server SIGKILLed while a rebuild's green builds;
 * PostgreSQL fast-restarted while the app-server is SIGSTOPped; PostgreSQL stopped while the writer sits in a held
 * COMMIT (or just after it, before it has read the reply); the api-server SIGKILLed as the alias switches.
 */
export const CDC_OVERLAP_FAULTS = [
  'rebuild-app-kill',
  'postgres-restart-paused',
  'postgres-restart-commit',
  'api-kill-switch',
] as const;
export type CdcFault = (typeof CDC_FAULTS)[number] | (typeof CDC_OVERLAP_FAULTS)[number];

/** A part a fault signals; faults of the same part never run at once (their steps would undo each other). */
export type FaultTarget = 'app' | 'postgres' | 'api';

/** Runs `step` while holding `target` (the one-at-a-time schedule needs no holding: it passes `run` through). */
export type HoldTarget = <T>(target: FaultTarget, step: () => Promise<T>) => Promise<T>;

const unheld: HoldTarget = (_target, step) => step();

/** PostgreSQL drops a walsender silent for this long: a pause of the app-server outlasts it. */
export const WAL_SENDER_TIMEOUT_MS = 2_000;

export interface CdcFaultLog {
  event(message: string): void;
  problem(kind: string, detail: string, evidence?: string[]): void;
  failedStart(message: string): void;
}

export interface CdcServices {
  app: Cluster;
  appNode: ChaosNode;
  api: Cluster;
  apiNode: ChaosNode;
  postgres: LogicalPostgresHandle;
  writer: AccountsWriter;
}

/** What the endpoint's status says of its generations; `failed`: its pipeline is not running (a failed start). */
export interface GenerationsNow {
  serving: string | null;
  building: string | null;
  failed: boolean;
}

/** The serving and building generations of the endpoint, or null when the app-server does not answer. */
/** How long a rebuild has to switch once it was asked and the fault schedule is over. */
const REBUILD_SETTLE_MS = 120_000;

export async function generationsOf(appUrl: string): Promise<GenerationsNow | null> {
  const reply = await request(`${appUrl}/v1/endpoints`);
  if (!reply.ok || reply.status !== 200) return null;
  const endpoint = (
    reply.body.endpoints as Array<{
      name: string;
      servingCache: string | null;
      buildingCache: string | null;
      phase: string;
    }>
  ).find((e) => e.name === ENDPOINT);
  return endpoint
    ? {
        serving: endpoint.servingCache,
        building: endpoint.buildingCache,
        failed: endpoint.phase === 'failed',
      }
    : null;
}

export class CdcFaultInjector {
  readonly counts: Record<CdcFault, number> = {
    'app-kill': 0,
    'app-pause': 0,
    'postgres-restart': 0,
    'api-kill': 0,
    rebuild: 0,
    'rebuild-app-kill': 0,
    'postgres-restart-paused': 0,
    'postgres-restart-commit': 0,
    'api-kill-switch': 0,
  };
  /** Held commits a restart landed on: inside COMMIT, or after it before the writer read the reply. */
  readonly commitRestarts = { inCommit: 0, afterCommit: 0, missed: 0 };
  #round: CdcFault[] = [];

  constructor(
    private readonly services: CdcServices,
    private readonly rng: Rng,
    private readonly log: CdcFaultLog,
  ) {}

  /**
   * When the fault schedule ends (a Date.now() value): a rebuild has until 120 s past the later of its request and
   * this to switch. Overlapping lanes can keep the app-server killed or frozen, or its source restarting, for most of
   * the run (seed 883247553: four app-server lives in a row killed or frozen before the green's snapshot could finish) —
   * a rebuild that switches once the faults stop is not a dropped rebuild.
   */
  faultsUntil = 0;

  /** Injects faults until `until` (a Date.now() value) and at least one round of every kind is done. */
  async run(until: number): Promise<void> {
    this.faultsUntil = until;
    let rounds = 0;
    while (Date.now() < until || rounds === 0) {
      await sleep(this.rng.int(1_000, 3_000));
      if (this.#round.length === 0) this.#round = this.#shuffled();
      await this.#one(this.#round.shift()!);
      if (this.#round.length === 0) rounds += 1;
    }
  }

  #shuffled(): CdcFault[] {
    const kinds = [...CDC_FAULTS];
    for (let i = kinds.length - 1; i > 0; i--) {
      const j = this.rng.int(0, i);
      [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
    }
    return kinds;
  }

  async #one(kind: CdcFault): Promise<void> {
    await this.inject(kind, this.rng, unheld);
  }

  /**
   * Injects one fault and waits until it has healed; `hold` guards each step that signals a part, so faults
   * scheduled independently never signal the same part at once. Draws from `rng` (the caller's lane).
   */
  async inject(kind: CdcFault, rng: Rng, hold: HoldTarget): Promise<void> {
    if (kind === 'app-kill') await hold('app', () => this.#appKill(rng));
    else if (kind === 'app-pause')
      await hold('app', () => this.#appPause(WAL_SENDER_TIMEOUT_MS + rng.int(1_000, 3_000)));
    else if (kind === 'postgres-restart')
      await hold('postgres', () => this.#postgresRestart(rng.int(100, 2_000)));
    else if (kind === 'api-kill') await hold('api', () => this.#apiKill(rng.int(100, 1_500)));
    else if (kind === 'rebuild') await this.#rebuild();
    else if (kind === 'rebuild-app-kill')
      await this.#rebuild({
        whileBuilding: async () => {
          await sleep(rng.int(0, 1_500));
          await hold('app', () => this.#appKill(rng, 'while the green builds'));
        },
      });
    else if (kind === 'api-kill-switch')
      await this.#rebuild({
        atSwitch: () => hold('api', () => this.#apiKill(rng.int(100, 1_000), 'as the alias switched')),
      });
    else if (kind === 'postgres-restart-paused')
      await hold('app', () =>
        hold('postgres', async () => {
          const { app, appNode } = this.services;
          app.pause(appNode);
          this.log.event('SIGSTOP app-server, PostgreSQL to restart while it is frozen');
          await sleep(rng.int(200, 1_500));
          await this.#postgresRestart(rng.int(100, 1_500));
          await sleep(rng.int(0, 2_000));
          app.resume(appNode);
          this.log.event('SIGCONT app-server');
        }),
      );
    else await hold('postgres', () => this.#restartInCommit(rng));
    this.counts[kind] += 1;
  }

  async #appKill(rng: Rng, when = ''): Promise<void> {
    const { app, appNode } = this.services;
    const downMs = rng.int(100, 2_000);
    await app.kill(appNode);
    this.log.event(
      `SIGKILL app-server (life ${appNode.life})${when ? ` ${when}` : ''}, restart in ${downMs} ms`,
    );
    await sleep(downMs);
    await app.startRetrying(appNode, this.log.failedStart);
    this.log.event(`app-server up again (life ${appNode.life})`);
  }

  async #appPause(ms: number): Promise<void> {
    const { app, appNode } = this.services;
    app.pause(appNode);
    this.log.event(`SIGSTOP app-server for ${ms} ms (wal_sender_timeout ${WAL_SENDER_TIMEOUT_MS} ms)`);
    await sleep(ms);
    app.resume(appNode);
    this.log.event('SIGCONT app-server');
  }

  async #postgresRestart(downMs: number): Promise<void> {
    const { postgres } = this.services;
    await postgres.stop('fast');
    this.log.event(`PostgreSQL stopped (fast), down for ${downMs} ms`);
    await sleep(downMs);
    await postgres.start();
    this.log.event('PostgreSQL up again');
  }

  async #apiKill(downMs: number, when = ''): Promise<void> {
    const { api, apiNode } = this.services;
    await api.kill(apiNode);
    this.log.event(
      `SIGKILL api-server (life ${apiNode.life})${when ? ` ${when}` : ''}, restart in ${downMs} ms`,
    );
    await sleep(downMs);
    await api.startRetrying(apiNode, this.log.failedStart);
    this.log.event(`api-server up again (life ${apiNode.life})`);
  }

  /**
   * The writer's next transaction (a big one half the time) sits in COMMIT for `commitMs` (a deferred trigger),
   * then waits `afterMs` before reading its LSN; PostgreSQL stops at a drawn moment of that window: inside COMMIT
   * (the transaction is rolled back) or after it (committed, the reply's reader gone: only the ledger can tell).
   */
  async #restartInCommit(rng: Rng): Promise<void> {
    const commitMs = rng.int(300, 1_200);
    const afterMs = rng.int(300, 800);
    const big = rng.chance(0.5);
    const stopAfter = rng.int(50, commitMs + afterMs - 100);
    const seq = await Promise.race([
      this.services.writer.holdNextCommit({ commitMs, afterMs, big }),
      sleep(10_000).then(() => null),
    ]);
    if (seq === null) {
      // The writer broke before its COMMIT (an overlapping fault): the hold was not reached.
      this.commitRestarts.missed += 1;
      this.log.event('held commit never reached COMMIT: PostgreSQL restarted anyway');
    } else {
      await sleep(stopAfter);
      const where = stopAfter < commitMs ? 'inside' : 'after';
      if (where === 'inside') this.commitRestarts.inCommit += 1;
      else this.commitRestarts.afterCommit += 1;
      this.log.event(
        `PostgreSQL to stop ${where} the held COMMIT of transaction ${seq}${big ? ' (big)' : ''} (${stopAfter} ms into ${commitMs} + ${afterMs} ms)`,
      );
    }
    await this.#postgresRestart(rng.int(100, 1_500));
  }

  /**
   * Asks for a rebuild and waits until no generation builds any more. `whileBuilding` runs once the green builds
   * (after it the green may be gone: a restart can resume the serving generation instead, which is not a failure);
   * `atSwitch` runs the moment the alias has moved. Without either, the rebuild must switch.
   */
  async #rebuild(
    hooks: { whileBuilding?: () => Promise<void>; atSwitch?: () => Promise<void> } = {},
  ): Promise<void> {
    const appUrl = this.services.appNode.url;
    const deadline = Math.max(Date.now(), this.faultsUntil) + REBUILD_SETTLE_MS;
    let before: string | null = null;
    // A fault just before may have left the pipeline restarting its stream: the rebuild is asked again until taken.
    for (;;) {
      before = (await generationsOf(appUrl))?.serving ?? null;
      const reply = await request(`${appUrl}/v1/endpoints/${ENDPOINT}/rebuild`, {
        method: 'POST',
        timeoutMs: 10_000,
      });
      // `restarted` is a failed endpoint started again, not a rebuild: asked again once it runs.
      if (reply.ok && reply.status === 202 && reply.body?.rebuild === 'started' && before !== null) break;
      if (Date.now() > deadline) {
        this.log.problem(
          'rebuild refused',
          `the rebuild was not taken within 120 s (after the faults stopped): ${reply.ok ? `${reply.status} ${JSON.stringify(reply.body).slice(0, 300)}` : reply.error}`,
        );
        return;
      }
      await sleep(500);
    }
    this.log.event(`rebuild asked (serving ${before})`);
    let interrupted = false;
    if (hooks.whileBuilding) {
      const building = await this.#poll(deadline, 100, (g) => g.building !== null || g.serving !== before);
      if (building?.building) {
        await hooks.whileBuilding();
        interrupted = true;
      } else this.log.event(`the green was not seen building (serving ${building?.serving ?? '?'})`);
    }
    if (hooks.atSwitch) {
      const moved = await this.#poll(deadline, 50, (g) => g.serving !== null && g.serving !== before);
      if (moved) {
        this.log.event(`switched ${before} → ${moved.serving}`);
        await hooks.atSwitch();
      }
    }
    // A pipeline that failed to start (PostgreSQL down as the app-server restarted) shows no green: not settled.
    const now = await this.#poll(
      deadline,
      300,
      (g) => !g.failed && g.serving !== null && g.building === null && (interrupted || g.serving !== before),
    );
    if (now) {
      this.log.event(
        now.serving === before
          ? `no switch: ${before} serves on, the green gone after the restart`
          : `settled on ${now.serving} (was ${before})`,
      );
      return;
    }
    const last = await generationsOf(appUrl);
    this.log.problem(
      'rebuild did not switch',
      `still serving ${last?.serving ?? '?'} (building ${last?.building ?? '-'}) 120 s after the rebuild of ${before} was asked (or after the faults stopped, if later)`,
    );
  }

  /** Polls the generations until `done` holds (the answer) or the deadline passes (null). */
  async #poll(
    deadline: number,
    everyMs: number,
    done: (g: GenerationsNow) => boolean,
  ): Promise<GenerationsNow | null> {
    for (;;) {
      const now = await generationsOf(this.services.appNode.url);
      if (now && done(now)) return now;
      if (Date.now() > deadline) return null;
      await sleep(everyMs);
    }
  }
}
