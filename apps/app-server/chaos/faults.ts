/**
 * The fault injector: every so often it freezes, kills or restarts a node, or restarts nats-server. It keeps at
 * least one node running and not frozen, so the cluster can always make progress (the point is to test what
 * happens to work in flight, not a total outage).
 */
import type { NatsServerHandle } from '@sluice/testkit';
import { sleep } from '@sluice/testkit';
import type { ChaosNode, Cluster } from './cluster.js';
import type { Rng } from './options.js';

export interface FaultCounts {
  pauses: number;
  kills: number;
  gracefulStops: number;
  restarts: number;
  natsRestarts: number;
}

export interface FaultLog {
  event(message: string): void;
  /** A node that would not come back, or a graceful stop that did not end well. */
  problem(kind: string, detail: string, evidence?: string[]): void;
  /** A start that failed (retried): worth a note, not a broken promise of the data plane. */
  failedStart(message: string): void;
}

export class FaultInjector {
  readonly counts: FaultCounts = { pauses: 0, kills: 0, gracefulStops: 0, restarts: 0, natsRestarts: 0 };
  /** Faults whose second half (resume, restart) is still scheduled. */
  readonly #pending = new Set<Promise<void>>();

  constructor(
    private readonly cluster: Cluster,
    private readonly nats: NatsServerHandle,
    private readonly rng: Rng,
    private readonly log: FaultLog,
  ) {}

  /** Injects faults until `until` (a Date.now() value); with `calm`, only waits. */
  async run(until: number, calm = false): Promise<void> {
    while (Date.now() < until) {
      await sleep(this.rng.int(600, 2_200));
      if (Date.now() >= until) break;
      if (!calm) await this.#one(until);
    }
    await Promise.allSettled([...this.#pending]);
  }

  /**
   * One fault. A roll whose target is busy (nats-server still restarting, fewer than two healthy nodes because
   * earlier faults have not healed yet) waits for it rather than being dropped: dropping made the number of faults
   * depend on how fast the machine restarts nodes — a slow CI machine ran 40 s with only 4 faults.
   */
  async #one(until: number) {
    const roll = this.rng.next();
    if (roll < 0.15) {
      if (await this.#waitFor(() => this.nats.running, until)) this.#later(this.#natsRestart());
      return;
    }
    // Never the last healthy node: someone must be there to answer and to take work over.
    if (!(await this.#waitFor(() => this.cluster.up().length > 1, until))) return;
    const node = this.rng.pick(this.cluster.up());
    if (roll < 0.5) this.#later(this.#pause(node));
    else if (roll < 0.8) this.#later(this.#kill(node));
    else this.#later(this.#gracefulRestart(node));
  }

  /** Polls `ready` until it holds (true) or the fault window ends (false). */
  async #waitFor(ready: () => boolean, until: number): Promise<boolean> {
    while (!ready()) {
      if (Date.now() >= until) return false;
      await sleep(100);
    }
    return Date.now() < until;
  }

  #later(work: Promise<void>) {
    const tracked = work.catch((err) => this.log.problem('fault injector', (err as Error).message));
    this.#pending.add(tracked);
    void tracked.finally(() => this.#pending.delete(tracked));
  }

  async #pause(node: ChaosNode) {
    // Up to 2.5 leases: some pauses end before the lease runs out, most after.
    const ms = this.rng.int(300, 5_000);
    this.cluster.pause(node);
    this.counts.pauses += 1;
    this.log.event(`SIGSTOP ${node.id} for ${ms} ms`);
    await sleep(ms);
    this.cluster.resume(node);
    this.log.event(`SIGCONT ${node.id}`);
  }

  async #kill(node: ChaosNode) {
    const downMs = this.rng.int(200, 3_000);
    await this.cluster.kill(node);
    this.counts.kills += 1;
    this.log.event(`SIGKILL ${node.id} (life ${node.life}), restart in ${downMs} ms`);
    await sleep(downMs);
    await this.#restart(node);
  }

  async #gracefulRestart(node: ChaosNode) {
    this.log.event(`SIGTERM ${node.id} (life ${node.life})`);
    const startedAt = Date.now();
    const how = await this.cluster.stopGracefully(node);
    this.counts.gracefulStops += 1;
    this.log.event(`${node.id} stopped after SIGTERM in ${Date.now() - startedAt} ms: ${how}`);
    if (!how.startsWith('exit code 0'))
      this.log.problem(
        'graceful stop',
        `${node.id} life ${node.life} ended with ${how} after SIGTERM (expected exit 0)`,
        this.cluster.tail(node, node.life, 10),
      );
    await sleep(this.rng.int(0, 1_500));
    await this.#restart(node);
  }

  async #restart(node: ChaosNode) {
    if (node.state !== 'down') return;
    await this.cluster.startRetrying(node, (message) => this.log.failedStart(message));
    this.counts.restarts += 1;
    this.log.event(`${node.id} up again (life ${node.life})`);
  }

  async #natsRestart() {
    const hard = this.rng.chance(0.5);
    const downMs = this.rng.int(200, 3_000);
    if (hard) await this.nats.kill();
    else await this.nats.stop();
    this.counts.natsRestarts += 1;
    this.log.event(`nats-server ${hard ? 'SIGKILL' : 'SIGTERM'}, down for ${downMs} ms`);
    await sleep(downMs);
    await this.nats.start();
    this.log.event('nats-server up again');
  }
}
