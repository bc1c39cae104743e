/**
 * The CDC chaos run's faults, one at a time on a seeded schedule: each kind once per round in a shuffled order (so
 * even a short run injects every kind), with a pause between two. A fault ends only once it has healed (the process
 * is back up, the rebuilt generation serves): the point is what a fault does to the mirror, not a total outage.
 */
import type { LogicalPostgresHandle } from '@sluice/testkit';
import { sleep } from '@sluice/testkit';
import { ENDPOINT } from './cdc-readers.js';
import type { ChaosNode, Cluster } from './cluster.js';
import { request } from './http.js';
import type { Rng } from './options.js';

export const CDC_FAULTS = ['app-kill', 'app-pause', 'postgres-restart', 'api-kill', 'rebuild'] as const;
export type CdcFault = (typeof CDC_FAULTS)[number];

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
}

/** The serving and building generations of the endpoint, or null when the app-server does not answer. */
export async function generationsOf(
  appUrl: string,
): Promise<{ serving: string | null; building: string | null } | null> {
  const reply = await request(`${appUrl}/v1/endpoints`);
  if (!reply.ok || reply.status !== 200) return null;
  const endpoint = (
    reply.body.endpoints as Array<{ name: string; servingCache: string | null; buildingCache: string | null }>
  ).find((e) => e.name === ENDPOINT);
  return endpoint ? { serving: endpoint.servingCache, building: endpoint.buildingCache } : null;
}

export class CdcFaultInjector {
  readonly counts: Record<CdcFault, number> = {
    'app-kill': 0,
    'app-pause': 0,
    'postgres-restart': 0,
    'api-kill': 0,
    rebuild: 0,
  };
  #round: CdcFault[] = [];

  constructor(
    private readonly services: CdcServices,
    private readonly rng: Rng,
    private readonly log: CdcFaultLog,
  ) {}

  /** Injects faults until `until` (a Date.now() value) and at least one round of every kind is done. */
  async run(until: number): Promise<void> {
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
    const { app, appNode, api, apiNode, postgres } = this.services;
    if (kind === 'app-kill') {
      const downMs = this.rng.int(100, 2_000);
      await app.kill(appNode);
      this.log.event(`SIGKILL app-server (life ${appNode.life}), restart in ${downMs} ms`);
      await sleep(downMs);
      await app.startRetrying(appNode, this.log.failedStart);
      this.log.event(`app-server up again (life ${appNode.life})`);
    } else if (kind === 'app-pause') {
      const ms = WAL_SENDER_TIMEOUT_MS + this.rng.int(1_000, 3_000);
      app.pause(appNode);
      this.log.event(`SIGSTOP app-server for ${ms} ms (wal_sender_timeout ${WAL_SENDER_TIMEOUT_MS} ms)`);
      await sleep(ms);
      app.resume(appNode);
      this.log.event('SIGCONT app-server');
    } else if (kind === 'postgres-restart') {
      const downMs = this.rng.int(100, 2_000);
      await postgres.stop('fast');
      this.log.event(`PostgreSQL stopped (fast), down for ${downMs} ms`);
      await sleep(downMs);
      await postgres.start();
      this.log.event('PostgreSQL up again');
    } else if (kind === 'api-kill') {
      const downMs = this.rng.int(100, 1_500);
      await api.kill(apiNode);
      this.log.event(`SIGKILL api-server (life ${apiNode.life}), restart in ${downMs} ms`);
      await sleep(downMs);
      await api.startRetrying(apiNode, this.log.failedStart);
      this.log.event(`api-server up again (life ${apiNode.life})`);
    } else await this.#rebuild();
    this.counts[kind] += 1;
  }

  /** Asks for a rebuild and waits for the switch to the new generation. */
  async #rebuild(): Promise<void> {
    const appUrl = this.services.appNode.url;
    const deadline = Date.now() + 120_000;
    let before: string | null = null;
    // A fault just before may have left the pipeline restarting its stream: the rebuild is asked again until taken.
    for (;;) {
      before = (await generationsOf(appUrl))?.serving ?? null;
      const reply = await request(`${appUrl}/v1/endpoints/${ENDPOINT}/rebuild`, {
        method: 'POST',
        timeoutMs: 10_000,
      });
      if (reply.ok && reply.status === 202 && before !== null) break;
      if (Date.now() > deadline) {
        this.log.problem(
          'rebuild refused',
          `the rebuild was not taken within 120 s: ${reply.ok ? `${reply.status} ${JSON.stringify(reply.body).slice(0, 300)}` : reply.error}`,
        );
        return;
      }
      await sleep(500);
    }
    this.log.event(`rebuild asked (serving ${before})`);
    for (;;) {
      const now = await generationsOf(appUrl);
      if (now && now.serving !== null && now.serving !== before && now.building === null) {
        this.log.event(`switched ${before} → ${now.serving}`);
        return;
      }
      if (Date.now() > deadline) {
        this.log.problem(
          'rebuild did not switch',
          `still serving ${now?.serving ?? '?'} (building ${now?.building ?? '-'}) 120 s after the rebuild of ${before} was asked`,
        );
        return;
      }
      await sleep(300);
    }
  }
}
