/**
 * The CDC chaos run's change-feed subscriber: a local replica (key → record) of `accounts` kept from the
 * api-server's change feed through `@sluice/client`'s `changes()` — what a user would write. The client reconnects
 * by itself after every drop (the api-server killed, a stream ended) from the last event id; the subscriber also
 * drops its own connection now and then, mid-transaction and mid-switch, and resumes with `after` = the id of the
 * last event it processed, as a restarted consumer does. It checks:
 * - at every `commit` (and `live`): the replica holds whole transactions (the balances' sum, the row count);
 * - `commit` positions never go back, across reconnects, resumes and `switch`es;
 * - between two snapshots or switches the source transactions arrive once each, in order, none missing (each row
 *   carries `txn`, the writer's sequence number: checked at the end against the writer's committed transactions);
 * - no upsert sets a row back to an older transaction than the replica holds;
 * - at the end, the replica equals the table.
 * A `reset` starts a new snapshot: counted and noted, and the rebuilt replica is checked like any other.
 */
import { type ChangeEvent, createClient, SluiceClientError } from '@sluice/client';
import { sleep } from '@sluice/testkit';
import {
  type AccountRow,
  ENDPOINT,
  type Invariants,
  lsnValue,
  type ReadViolation,
  wholeProblems,
} from './cdc-readers.js';
import type { AccountsWriter } from './cdc-writer.js';
import type { Rng } from './options.js';

export interface FeedCounts {
  /** Events applied (every type). */
  events: number;
  upserts: number;
  deletes: number;
  commits: number;
  /** `commit`s after which the whole replica was checked (every one; `live`s are counted in `snapshots`). */
  checkedCommits: number;
  /** `commit`s that closed more than one source transaction (the contract has one `commit` per transaction). */
  multiTransactionCommits: number;
  /** `live` events: snapshots completed (the first one included). */
  snapshots: number;
  switches: number;
  /** `reset` events by reason (the server's, or the client's `reconnected-during-snapshot`). */
  resets: Record<string, number>;
  /** Connections the client lost (api-server killed, stream ended) and opened again by itself. */
  connectionsLost: number;
  reconnects: number;
  /** Connections the subscriber dropped itself and resumed with `after` (of them, in the middle of a switch). */
  resumes: number;
  resumesInSwitch: number;
  /** Source transactions seen in the feed, in order, between snapshots and switches (checked at the end). */
  transactions: number;
}

/** Where the replica is: loading a snapshot (until `live`), following, or between `switch` and its `commit`. */
const ReplicaPhase = {
  snapshot: 'snapshot',
  following: 'following',
  switching: 'switching',
} as const;
type ReplicaPhase = (typeof ReplicaPhase)[keyof typeof ReplicaPhase];

/**
 * The transactions the feed delivered one by one from a known state (a snapshot's `live`, a switch's `commit`) to
 * the next such point: every committed transaction after `from` up to the last one seen must be among them.
 */
interface Stretch {
  /** The last transaction in the state it started from (the highest `txn` of the replica then). */
  from: number;
  txns: number[];
  /** How it started, for evidence. */
  start: string;
}

export class ChangeFeedReplica {
  readonly counts: FeedCounts = {
    events: 0,
    upserts: 0,
    deletes: 0,
    commits: 0,
    checkedCommits: 0,
    multiTransactionCommits: 0,
    snapshots: 0,
    switches: 0,
    resets: {},
    connectionsLost: 0,
    reconnects: 0,
    resumes: 0,
    resumesInSwitch: 0,
    transactions: 0,
  };
  /** Resets and the first notable things, for the report. */
  readonly notes: string[] = [];
  readonly #replica = new Map<number, AccountRow>();
  #phase: ReplicaPhase = ReplicaPhase.snapshot;
  /** The `id` of the last event applied: where a resume starts (none during a snapshot). */
  #lastToken: string | undefined;
  /** Transactions of the upserts since the last `commit`. */
  #pending = new Set<number>();
  /** Events applied since the last `commit`/`live` (0: the replica is at a consistent point). */
  #sinceCommit = 0;
  #stretch: Stretch | null = null;
  readonly #stretches: Stretch[] = [];
  #highest: { lsn: bigint; text: string } | null = null;
  /** Events until the subscriber drops its own connection next; in a switch, merge events until it does. */
  #dropIn: number;
  #dropInSwitch: number | null = null;
  /** Switches (`from → to`) the subscriber has dropped its connection in once. */
  readonly #switchesDroppedIn = new Set<string>();
  #abort = new AbortController();
  #loop: Promise<void> | null = null;
  #stopped = false;

  constructor(
    private readonly apiUrl: string,
    private readonly expected: Invariants,
    private readonly rng: Rng,
    private readonly violate: (v: ReadViolation) => void,
    private readonly recent: () => string[],
  ) {
    this.#dropIn = this.#nextDrop();
  }

  start(): void {
    this.#loop = this.#run();
  }

  /** Stops following (the connection is closed); resolves once the loop has ended. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abort.abort();
    await this.#loop;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Where the replica stands, for evidence: its phase and the events since the last consistent point. */
  get where(): string {
    return `${this.#phase}, ${this.#sinceCommit} events since the last commit`;
  }

  /** True when the replica is at a `commit` (or `live`) and holds exactly `table`'s rows. */
  matches(table: AccountRow[]): boolean {
    return this.#sinceCommit === 0 && this.#phase === ReplicaPhase.following && this.diff(table).length === 0;
  }

  get rows(): AccountRow[] {
    return [...this.#replica.values()].sort((a, b) => a.id - b.id);
  }

  /** Row-for-row differences between `table` and the replica. */
  diff(table: AccountRow[]): string[] {
    const out: string[] = [];
    for (const row of table) {
      const got = this.#replica.get(row.id);
      if (!got) out.push(`key ${row.id} missing from the replica: table has ${JSON.stringify(row)}`);
      else if (JSON.stringify(got) !== JSON.stringify(row))
        out.push(`key ${row.id}: table ${JSON.stringify(row)}, replica ${JSON.stringify(got)}`);
    }
    const ids = new Set(table.map((r) => r.id));
    for (const row of this.#replica.values())
      if (!ids.has(row.id))
        out.push(`key ${row.id} in the replica but not in the table: ${JSON.stringify(row)}`);
    return out;
  }

  /**
   * Once the writer has stopped: every committed transaction after a stretch's start up to its last one must have
   * been seen in it, and none that never committed.
   */
  settleTransactions(writer: AccountsWriter): void {
    const committed = writer.writes.map((w) => w.seq);
    const committedSet = new Set(committed);
    const stretches = this.#stretch ? [...this.#stretches, this.#stretch] : this.#stretches;
    for (const stretch of stretches) {
      if (stretch.txns.length === 0) continue;
      const last = stretch.txns.at(-1)!;
      const seen = new Set(stretch.txns);
      const missing = committed.filter((seq) => seq > stretch.from && seq <= last && !seen.has(seq));
      if (missing.length > 0)
        this.violate({
          kind: 'feed: transactions missing',
          detail: `${missing.length} committed transactions between ${stretch.from} and ${last} never came (${missing.slice(0, 10).join(', ')}), in the stretch that started ${stretch.start}`,
          evidence: [],
        });
      const never = stretch.txns.filter((seq) => !committedSet.has(seq));
      if (never.length > 0)
        this.violate({
          kind: 'feed: uncommitted transaction',
          detail: `transactions ${never.slice(0, 10).join(', ')} came in the feed, but the writer's ledger says they rolled back`,
          evidence: [],
        });
    }
  }

  #nextDrop(): number {
    return this.rng.int(300, 3_000);
  }

  async #run(): Promise<void> {
    const client = createClient({ queryUrl: this.apiUrl });
    const accounts = client.endpoint<AccountRow & Record<string, unknown>>(ENDPOINT);
    while (!this.#stopped) {
      const resumeFrom = this.#phase === ReplicaPhase.snapshot ? undefined : this.#lastToken;
      if (resumeFrom === undefined) this.#beginSnapshot();
      let dropped = false;
      try {
        for await (const event of accounts.changes({
          ...(resumeFrom !== undefined ? { after: resumeFrom } : {}),
          signal: this.#abort.signal,
          backoff: { initialMs: 100, maxMs: 1_000 },
          onConnectionLost: () => {
            this.counts.connectionsLost += 1;
          },
          onOpen: () => {
            if (this.counts.connectionsLost > this.counts.reconnects) this.counts.reconnects += 1;
          },
        })) {
          this.apply(event);
          if (this.#shouldDrop(event)) {
            dropped = true;
            break;
          }
        }
      } catch (err) {
        if (this.#stopped) return;
        this.violate({
          kind: 'feed: ended',
          detail: `the change feed ended with ${err instanceof SluiceClientError ? `${err.code} (${err.status})` : ''} ${(err as Error).message}`,
          evidence: this.recent(),
        });
        await sleep(1_000);
        continue;
      }
      if (this.#stopped) return;
      // A consumer restarting takes a moment; in a switch, long enough for the new generation to move on.
      if (dropped) await sleep(this.#phase === ReplicaPhase.switching ? this.rng.int(200, 1_500) : 0);
      if (!dropped) {
        this.violate({
          kind: 'feed: ended',
          detail: 'the change feed iterator returned on its own',
          evidence: this.recent(),
        });
        await sleep(1_000);
      }
    }
  }

  /**
   * Whether to drop the connection after `event` (a consumer restarting): now and then while following (often
   * mid-transaction), and once in half the switches a few events into the merge. Never during a snapshot (its
   * records carry no id), and a switch resumed from its id is merged again from the start: dropping there again
   * and again would never let a long merge finish.
   */
  #shouldDrop(event: ChangeEvent<AccountRow>): boolean {
    if (event.type === 'switch') {
      const which = `${event.from} → ${event.to}`;
      if (!this.#switchesDroppedIn.has(which) && this.rng.chance(0.5)) {
        this.#switchesDroppedIn.add(which);
        this.#dropInSwitch = this.rng.int(0, 5);
      }
    }
    if (this.#phase === ReplicaPhase.switching) {
      if (this.#dropInSwitch === null || this.#dropInSwitch-- > 0) return false;
      this.#dropInSwitch = null;
      this.counts.resumes += 1;
      this.counts.resumesInSwitch += 1;
      return true;
    }
    this.#dropInSwitch = null;
    if (this.#phase !== ReplicaPhase.following || --this.#dropIn > 0) return false;
    this.#dropIn = this.#nextDrop();
    this.counts.resumes += 1;
    return true;
  }

  #beginSnapshot(): void {
    this.#endStretch();
    this.#replica.clear();
    this.#phase = ReplicaPhase.snapshot;
    this.#pending.clear();
    this.#sinceCommit = 0;
    this.#lastToken = undefined;
  }

  #endStretch(): void {
    if (this.#stretch) this.#stretches.push(this.#stretch);
    this.#stretch = null;
  }

  /** Applies one event of the feed to the replica and checks it (the loop calls it; the checker's tests too). */
  apply(event: ChangeEvent<AccountRow>): void {
    this.counts.events += 1;
    this.#sinceCommit += 1;
    switch (event.type) {
      case 'upsert': {
        this.counts.upserts += 1;
        const row = event.record;
        if (this.#phase === ReplicaPhase.following) {
          const before = this.#replica.get(row.id);
          if (before && row.txn < before.txn)
            this.violate({
              kind: 'feed: older version applied',
              detail: `key ${row.id} upserted with txn ${row.txn} over txn ${before.txn}`,
              evidence: [`upsert ${JSON.stringify(row)}`, ...this.recent()],
            });
          this.#pending.add(row.txn);
        }
        this.#replica.set(row.id, row);
        break;
      }
      case 'delete':
        this.counts.deletes += 1;
        this.#replica.delete(event.key[0] as number);
        break;
      case 'reset':
        this.counts.resets[event.reason] = (this.counts.resets[event.reason] ?? 0) + 1;
        if (this.notes.length < 10)
          this.notes.push(`reset {${event.reason}} after ${this.counts.events} events`);
        this.#beginSnapshot();
        this.#sinceCommit = 1;
        return;
      case 'switch':
        this.counts.switches += 1;
        this.#endStretch();
        this.#phase = ReplicaPhase.switching;
        this.#pending.clear();
        break;
      case 'live':
        this.counts.snapshots += 1;
        this.#consistentPoint(`live on ${event.generation}`, null);
        this.#startStretch(`at the snapshot of ${event.generation}`);
        this.#phase = ReplicaPhase.following;
        break;
      case 'commit': {
        this.counts.commits += 1;
        this.#consistentPoint('commit', event.position);
        if (this.#phase === ReplicaPhase.switching) {
          this.#startStretch('at a switch');
          this.#phase = ReplicaPhase.following;
        } else if (this.#phase === ReplicaPhase.following) this.#closeTransactions();
        break;
      }
    }
    if ('token' in event && event.token !== undefined) this.#lastToken = event.token;
  }

  /** A `commit` or `live`: the replica must hold whole transactions, and the position must not go back. */
  #consistentPoint(what: string, position: Record<string, unknown> | null): void {
    this.#sinceCommit = 0;
    this.counts.checkedCommits += what === 'commit' ? 1 : 0;
    const problems = wholeProblems([...this.#replica.values()], this.expected);
    if (problems.length > 0)
      this.violate({
        kind: 'feed: half-applied transaction',
        detail: `at ${what} (${this.#phase}): ${problems.join('; ')}`,
        evidence: [`position ${JSON.stringify(position)}`, ...this.recent()],
      });
    const lsn = lsnIn(position);
    if (lsn === null) return;
    const value = lsnValue(lsn);
    const text = `${lsn} (${this.#phase}, event ${this.counts.events})`;
    if (this.#highest && value < this.#highest.lsn)
      this.violate({
        kind: 'feed: commit position went back',
        detail: `commit at ${text} after one at ${this.#highest.text}`,
        evidence: this.recent(),
      });
    else this.#highest = { lsn: value, text };
  }

  #startStretch(start: string): void {
    let from = 0;
    for (const row of this.#replica.values()) from = Math.max(from, row.txn);
    this.#stretch = { from, txns: [], start };
    this.#pending.clear();
  }

  /** The transactions of one `commit`: each after every one before it in this stretch (never twice). */
  #closeTransactions(): void {
    const stretch = this.#stretch;
    const txns = [...this.#pending].sort((a, b) => a - b);
    this.#pending.clear();
    if (!stretch || txns.length === 0) return;
    if (txns.length > 1) this.counts.multiTransactionCommits += 1;
    const last = stretch.txns.at(-1) ?? stretch.from;
    if (txns[0]! <= last)
      this.violate({
        kind: 'feed: transaction delivered twice',
        detail: `a commit brought transactions ${txns.join(', ')} after transaction ${last} (stretch started ${stretch.start} from ${stretch.from})`,
        evidence: this.recent(),
      });
    this.counts.transactions += txns.length;
    stretch.txns.push(...txns.filter((t) => t > last));
  }
}

/** The replication LSN in a `commit` event's position (`{ 'accounts.source': { lsn, … }, … }`), or null. */
export function lsnIn(position: Record<string, unknown> | null): string | null {
  for (const value of Object.values(position ?? {})) {
    const lsn = (value as { lsn?: unknown } | null)?.lsn;
    if (typeof lsn === 'string' && /^[0-9A-Fa-f]+\/[0-9A-Fa-f]+$/.test(lsn)) return lsn;
  }
  return null;
}
