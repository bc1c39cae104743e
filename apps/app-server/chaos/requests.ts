/**
 * The client side of the run: what a caller does through the control API (submit, resend the same body to any
 * node, terminate, list) and what it learns, per transfer. It also checks the promises visible in replies alone:
 * the same body is never refused as a conflict, no 500s, a terminal state never changes, and only transfers the
 * run terminated end TERMINATED.
 */
import { sleep } from '@sluice/testkit';
import type { ChaosNode, Cluster } from './cluster.js';
import type { Destinations, Sample } from './destinations.js';
import { describe, request } from './http.js';
import type { Rng } from './options.js';
import type { TransferSpec } from './workload.js';

const FINAL = new Set(['COMPLETED', 'FAILED', 'TERMINATED']);
/** Retryable by design (the store or the backplane is away), unlike a 500. */
const UNAVAILABLE = new Set(['STORE_UNAVAILABLE', 'BACKPLANE_UNAVAILABLE']);

/** What the driver knows about one transfer: its own requests and what it saw, for the evidence. */
export interface Tracked {
  spec: TransferSpec;
  accepted: boolean;
  events: string[];
  /** The first final state seen: terminal states never change. */
  final: string | null;
  // biome-ignore lint/suspicious/noExplicitAny: the record as the API returned it
  record: any;
  /** The run asked for it to be terminated. */
  terminate: boolean;
  /** The destination when TERMINATED was first reported to the driver. */
  terminatedSample: { at: number; sample: Sample; how: string } | null;
}

export interface RequestLog {
  rel(at?: number): string;
  violate(kind: string, transfer: string | null, detail: string): void;
  note(message: string): void;
}

export class Requests {
  readonly tracked = new Map<string, Tracked>();
  readonly counts = { submits: 0, resubmits: 0, terminatesSent: 0, terminatesReported: 0 };

  constructor(
    specs: TransferSpec[],
    private readonly cluster: Cluster,
    private readonly destinations: Destinations,
    private readonly rng: Rng,
    private readonly log: RequestLog,
  ) {
    for (const spec of specs)
      this.tracked.set(spec.id, {
        spec,
        accepted: false,
        events: [],
        final: null,
        record: null,
        terminate: false,
        terminatedSample: null,
      });
  }

  open(): Tracked[] {
    return [...this.tracked.values()].filter((t) => t.final === null);
  }

  /** Any node that is up and not frozen (waits while there is none). */
  async anyUp(): Promise<ChaosNode> {
    for (;;) {
      const up = this.cluster.up();
      if (up.length > 0) return this.rng.pick(up);
      await sleep(100);
    }
  }

  /** Sends the transfer's one body to some node; true when a node accepted it (2xx). */
  async submit(t: Tracked, resend: boolean): Promise<boolean> {
    const node = await this.anyUp();
    const reply = await request(`${node.url}/v1/transfers`, { json: t.spec.body });
    if (resend) this.counts.resubmits += 1;
    else this.counts.submits += 1;
    const what = resend ? 'resubmit' : 'submit';
    if (!reply.ok) {
      this.#event(t, `${what} → ${node.id}: ${reply.error}`);
      return false;
    }
    this.#event(t, `${what} → ${node.id}: ${reply.status} ${describe(reply.body)}`);
    if (reply.status === 422 && reply.body?.code === 'IDEMPOTENCY_CONFLICT')
      this.log.violate('idempotency conflict', t.spec.id, `the same body resent to ${node.id} was refused`);
    if (reply.status >= 500 && !UNAVAILABLE.has(reply.body?.code))
      this.log.violate(
        'internal error',
        t.spec.id,
        `submit to ${node.id}: ${reply.status} ${describe(reply.body)}`,
      );
    return reply.status >= 200 && reply.status < 300;
  }

  /** Until some node accepts it. */
  async submitUntilAccepted(t: Tracked): Promise<void> {
    while (!t.accepted) {
      t.accepted = await this.submit(t, false);
      if (!t.accepted) await sleep(this.rng.int(200, 800));
    }
  }

  /** Asks any node to terminate; retried while nodes time out or the transfer is not final yet. */
  async terminate(t: Tracked): Promise<void> {
    t.terminate = true;
    for (let attempt = 0; attempt < 6 && t.final === null; attempt++) {
      const node = await this.anyUp();
      this.counts.terminatesSent += 1;
      // Terminate answers once the owner stopped: give it a few leases.
      const reply = await request(`${node.url}/v1/transfers/${t.spec.id}/terminate`, {
        method: 'POST',
        timeoutMs: 10_000,
      });
      if (!reply.ok) {
        this.#event(t, `terminate → ${node.id}: ${reply.error}`);
        await sleep(500);
        continue;
      }
      this.#event(t, `terminate → ${node.id}: ${reply.status} ${describe(reply.body)}`);
      if (reply.status === 200 && reply.body?.state === 'TERMINATED') {
        this.counts.terminatesReported += 1;
        await this.observe(t, reply.body, `terminate reply from ${node.id}`);
        return;
      }
      if (reply.status === 409) return; // already COMPLETED or FAILED
      if (reply.status >= 500 && !UNAVAILABLE.has(reply.body?.code))
        this.log.violate(
          'internal error',
          t.spec.id,
          `terminate on ${node.id}: ${reply.status} ${describe(reply.body)}`,
        );
      await sleep(500);
    }
  }

  /** Reads every record through one live node's list route. */
  async poll(): Promise<boolean> {
    const node = await this.anyUp();
    let cursor: string | null = null;
    do {
      const query: string = `limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const reply = await request(`${node.url}/v1/transfers?${query}`);
      if (!reply.ok || reply.status !== 200) return false;
      for (const record of reply.body.records ?? []) {
        const t = this.tracked.get(record.id);
        if (t) await this.observe(t, record, `listed by ${node.id}`);
        else this.log.violate('unknown record', record.id, `listed but never submitted: ${describe(record)}`);
      }
      cursor = reply.body.next ?? null;
    } while (cursor);
    return true;
  }

  /** A record as some reply showed it: the first final state is kept (and the destination sampled at TERMINATED). */
  // biome-ignore lint/suspicious/noExplicitAny: the record as the API returned it
  async observe(t: Tracked, record: any, how: string): Promise<void> {
    t.record = record;
    if (!FINAL.has(record.state)) return;
    if (t.final !== null) {
      if (t.final !== record.state)
        this.log.violate('terminal state changed', t.spec.id, `was ${t.final}, now ${record.state} (${how})`);
      return;
    }
    t.final = record.state;
    this.#event(t, `${record.state} (${how}) epoch=${record.epoch} owner=${record.owner?.nodeId ?? '-'}`);
    if (record.state !== 'TERMINATED') return;
    if (!t.terminate)
      this.log.violate('terminated unasked', t.spec.id, `TERMINATED (${how}) though nobody asked`);
    const at = Date.now();
    try {
      t.terminatedSample = { at, sample: await this.destinations.sample(t.spec), how };
    } catch (err) {
      this.log.note(
        `${t.spec.id}: could not sample the destination at TERMINATED: ${(err as Error).message}`,
      );
    }
  }

  #event(t: Tracked, message: string) {
    t.events.push(`${this.log.rel()} ${message}`);
  }
}
