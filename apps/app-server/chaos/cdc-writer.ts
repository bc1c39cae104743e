/**
 * The CDC chaos run's writer: multi-statement transactions on `accounts (id, balance, note, txn)` that keep two
 * invariants a reader can check in any single response — the sum of `balance` and the number of rows — so a
 * half-applied source transaction shows. Each commit also inserts its sequence number into `ledger` (a table the
 * endpoint does not mirror): when PostgreSQL goes away mid-COMMIT, the ledger says afterwards whether it happened.
 * A fault can ask for the next commit to be held ({@link AccountsWriter.holdNextCommit}): a deferred constraint
 * trigger on `ledger` sleeps inside COMMIT, so a restart can be made to land there, or just after it.
 */
import { sleep } from '@sluice/testkit';
import pg from 'pg';
import type { Rng } from './options.js';

export const WRITE_KINDS = ['transfer', 'replace', 'move', 'big-shuffle', 'big-move', 'big-replace'] as const;
export type WriteKind = (typeof WRITE_KINDS)[number];

/** One committed source transaction, as read-your-writes readers ask for it. */
export interface Write {
  seq: number;
  kind: WriteKind;
  /** `pg_current_wal_lsn()` right after the commit: what a client sends as `sluice-min-position`. */
  lsn: string;
  /** Keys this transaction left in place with `txn = seq` (a sample for big ones). */
  keys: number[];
  /** Keys this transaction deleted (or moved away from). */
  removed: number[];
  /** The connection broke around COMMIT and the ledger said it had committed (its LSN is a later one). */
  uncertain: boolean;
}

interface Statement {
  text: string;
  values?: unknown[];
}

interface Plan {
  kind: WriteKind;
  statements: Statement[];
  keys: number[];
  removed: number[];
  /** The live keys once committed. */
  live: number[];
}

/** Table and ledger, `rows` accounts of balance 100 each. */
export async function createAccounts(url: string, rows: number): Promise<{ sum: number; rows: number }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(
      'CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, note text, txn int NOT NULL)',
    );
    await client.query('CREATE TABLE ledger (seq int PRIMARY KEY, kind text NOT NULL)');
    // Runs at COMMIT (deferred), before the commit record: a transaction that set chaos.hold_ms sits in COMMIT
    // that long, holding its locks, as a commit slowed by a busy disk or a synchronous standby would.
    await client.query(`CREATE FUNCTION ledger_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_sleep(coalesce(nullif(current_setting('chaos.hold_ms', true), ''), '0')::int / 1000.0);
        RETURN NULL;
      END $$`);
    await client.query(
      'CREATE CONSTRAINT TRIGGER ledger_hold AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_hold()',
    );
    await client.query("INSERT INTO accounts SELECT g, 100, 'n' || g, 0 FROM generate_series(1, $1::int) g", [
      rows,
    ]);
  } finally {
    await client.end();
  }
  return { sum: rows * 100, rows };
}

/** A commit a fault asked to hold: COMMIT sits `commitMs` in the trigger, then `afterMs` pass before the LSN is read. */
export interface CommitHold {
  commitMs: number;
  afterMs: number;
  /** The held transaction is a big one (thousands of rows in one source transaction). */
  big: boolean;
}

interface PendingHold extends CommitHold {
  /** Resolved as COMMIT is sent, with the transaction's sequence number. */
  committing: (seq: number) => void;
}

export class AccountsWriter {
  readonly writes: Write[] = [];
  /** Key → the sequence number of the transaction that removed it (keys are never reused). */
  readonly removedBy = new Map<number, number>();
  readonly counts: Record<WriteKind, number> = {
    transfer: 0,
    replace: 0,
    move: 0,
    'big-shuffle': 0,
    'big-move': 0,
    'big-replace': 0,
  };
  /** Transactions whose connection broke; `uncertainCommits` of them had committed. */
  connectionLosses = 0;
  uncertainCommits = 0;
  #live: number[];
  #nextId: number;
  #seq = 0;
  #client: pg.Client | null = null;
  #stopped = false;
  #loop: Promise<void> | null = null;
  #hold: PendingHold | null = null;

  constructor(
    private readonly url: string,
    rows: number,
    private readonly rng: Rng,
    private readonly event: (message: string) => void,
  ) {
    this.#live = Array.from({ length: rows }, (_, i) => i + 1);
    this.#nextId = rows + 1;
  }

  /** The last committed write (null before the first). */
  get last(): Write | null {
    return this.writes.at(-1) ?? null;
  }

  start(): void {
    this.#loop = this.#run();
  }

  /**
   * Holds the next transaction's COMMIT (see {@link CommitHold}); resolves with its sequence number once COMMIT is
   * sent, so a fault can be timed against it.
   *
   * @example
   * ```ts
   * const seq = await writer.holdNextCommit({ commitMs: 800, afterMs: 400, big: true });
   * await sleep(600); // inside COMMIT
   * await postgres.stop('fast');
   * ```
   */
  holdNextCommit(hold: CommitHold): Promise<number> {
    return new Promise((committing) => {
      this.#hold = { ...hold, committing };
    });
  }

  /** Stops after the transaction in flight; rejects with the writer's own error (not a connection loss). */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
    await this.#client?.end().catch(() => {});
    this.#client = null;
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const seq = ++this.#seq;
      const hold = this.#hold;
      this.#hold = null;
      const plan = hold?.big ? this.#big(seq) : this.#plan(seq);
      let write: Write | null = null;
      try {
        write = await this.#commit(seq, plan, hold);
      } catch (err) {
        this.connectionLosses += 1;
        this.#client?.end().catch(() => {});
        this.#client = null;
        // Whether it committed is the ledger's to say, once PostgreSQL answers again.
        const lsn = await this.#committedLsn(seq);
        this.event(
          `writer: transaction ${seq} (${plan.kind}) broke (${(err as Error).message.slice(0, 80)}); ${lsn ? 'it had committed' : 'rolled back'}`,
        );
        if (lsn) {
          this.uncertainCommits += 1;
          write = { seq, kind: plan.kind, lsn, keys: plan.keys, removed: plan.removed, uncertain: true };
        }
      }
      if (write) {
        this.#live = plan.live;
        for (const key of plan.removed) this.removedBy.set(key, seq);
        this.counts[plan.kind] += 1;
        this.writes.push(write);
      }
      await sleep(this.rng.int(20, 80));
    }
  }

  async #connect(): Promise<pg.Client> {
    if (this.#client) return this.#client;
    const client = new pg.Client({ connectionString: this.url });
    // A server that goes away (fast shutdown) errors idle clients: handled by the next query's failure.
    client.on('error', () => {});
    await client.connect();
    this.#client = client;
    return client;
  }

  async #commit(seq: number, plan: Plan, hold: PendingHold | null): Promise<Write> {
    const client = await this.#connect();
    await client.query('BEGIN');
    for (const s of plan.statements) await client.query(s.text, s.values);
    await client.query('INSERT INTO ledger (seq, kind) VALUES ($1, $2)', [seq, plan.kind]);
    if (hold) {
      await client.query(`SET LOCAL chaos.hold_ms = ${hold.commitMs}`);
      const commit = client.query('COMMIT');
      hold.committing(seq);
      await commit;
      // A reply that comes late: a connection lost now is lost after the commit, which only the ledger can tell.
      await sleep(hold.afterMs);
    } else await client.query('COMMIT');
    const lsn = (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!
      .lsn;
    return { seq, kind: plan.kind, lsn, keys: plan.keys, removed: plan.removed, uncertain: false };
  }

  /** After a broken transaction: reconnects (waiting out a restart) and returns the LSN if `seq` committed. */
  async #committedLsn(seq: number): Promise<string | null> {
    for (;;) {
      try {
        const client = await this.#connect();
        const found = await client.query('SELECT 1 FROM ledger WHERE seq = $1', [seq]);
        if (found.rowCount === 0) return null;
        return (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
      } catch {
        this.#client?.end().catch(() => {});
        this.#client = null;
        await sleep(200);
      }
    }
  }

  #pick(exclude: number[] = []): number {
    for (;;) {
      const key = this.rng.pick(this.#live);
      if (!exclude.includes(key)) return key;
    }
  }

  #plan(seq: number): Plan {
    const roll = this.rng.next();
    if (roll < 0.03) return this.#big(seq);
    if (roll < 0.55) {
      // A transfer between two accounts, sometimes touching a note too.
      const a = this.#pick();
      const b = this.#pick([a]);
      const x = this.rng.int(1, 50);
      const note = this.rng.chance(0.3) ? ', note = md5(random()::text)' : '';
      return {
        kind: 'transfer',
        statements: [
          {
            text: `UPDATE accounts SET balance = balance - $1, txn = $2${note} WHERE id = $3`,
            values: [x, seq, a],
          },
          { text: 'UPDATE accounts SET balance = balance + $1, txn = $2 WHERE id = $3', values: [x, seq, b] },
        ],
        keys: [a, b],
        removed: [],
        live: this.#live,
      };
    }
    if (roll < 0.8) {
      // An account closed and its balance carried to a new one: delete + insert, the row count unchanged.
      const old = this.#pick();
      const fresh = this.#nextId++;
      return {
        kind: 'replace',
        statements: [
          {
            text: "INSERT INTO accounts (id, balance, note, txn) SELECT $1, balance, 'from ' || id, $2 FROM accounts WHERE id = $3",
            values: [fresh, seq, old],
          },
          { text: 'DELETE FROM accounts WHERE id = $1', values: [old] },
        ],
        keys: [fresh],
        removed: [old],
        live: this.#live.map((k) => (k === old ? fresh : k)),
      };
    }
    // A primary-key change, and a transfer to the moved row in the same transaction.
    const old = this.#pick();
    const other = this.#pick([old]);
    const fresh = this.#nextId++;
    return {
      kind: 'move',
      statements: [
        { text: 'UPDATE accounts SET id = $1, txn = $2 WHERE id = $3', values: [fresh, seq, old] },
        { text: 'UPDATE accounts SET balance = balance + 7, txn = $1 WHERE id = $2', values: [seq, fresh] },
        { text: 'UPDATE accounts SET balance = balance - 7, txn = $1 WHERE id = $2', values: [seq, other] },
      ],
      keys: [fresh, other],
      removed: [old],
      live: this.#live.map((k) => (k === old ? fresh : k)),
    };
  }

  /** Thousands of rows in one transaction: every row's balance, or half the rows moved or replaced. */
  #big(seq: number): Plan {
    const shuffled = [...this.#live];
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = this.rng.int(0, i);
      [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
    }
    const half = Math.floor(shuffled.length / 2);
    const first = shuffled.slice(0, half);
    const second = shuffled.slice(half, half * 2);
    const sample = (keys: number[]) => keys.slice(0, 3);
    const variant = this.rng.int(0, 2);
    if (variant === 0)
      return {
        kind: 'big-shuffle',
        statements: [
          {
            text: 'UPDATE accounts SET balance = balance + 1, txn = $1 WHERE id = ANY($2)',
            values: [seq, first],
          },
          {
            text: 'UPDATE accounts SET balance = balance - 1, txn = $1 WHERE id = ANY($2)',
            values: [seq, second],
          },
        ],
        keys: [...sample(first), ...sample(second)],
        removed: [],
        live: this.#live,
      };
    const fresh = first.map(() => this.#nextId++);
    const mapping = new Map(first.map((k, i) => [k, fresh[i]!]));
    const live = this.#live.map((k) => mapping.get(k) ?? k);
    if (variant === 1)
      return {
        kind: 'big-move',
        statements: [
          {
            text: 'UPDATE accounts a SET id = m.n, txn = $1 FROM unnest($2::int[], $3::int[]) AS m(o, n) WHERE a.id = m.o',
            values: [seq, first, fresh],
          },
        ],
        keys: sample(fresh),
        removed: first,
        live,
      };
    return {
      kind: 'big-replace',
      statements: [
        {
          text: `INSERT INTO accounts (id, balance, note, txn)
                 SELECT m.n, a.balance, 'from ' || a.id, $1 FROM accounts a JOIN unnest($2::int[], $3::int[]) AS m(o, n) ON a.id = m.o`,
          values: [seq, first, fresh],
        },
        { text: 'DELETE FROM accounts WHERE id = ANY($1)', values: [first] },
      ],
      keys: sample(fresh),
      removed: first,
      live,
    };
  }
}
