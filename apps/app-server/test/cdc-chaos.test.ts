/**
 * The chaos run of the PostgreSQL mirror in CI's size (about 45 s of overlapping faults: app-server SIGKILL and
 * SIGSTOP past wal_sender_timeout, PostgreSQL fast restarts — also while the app-server is frozen and inside or just
 * after a held COMMIT — api-server SIGKILL, also as the alias switches, blue/green rebuilds with an app-server kill
 * while the green builds) with a fixed seed, asserting zero violations, that every kind of fault happened, that
 * faults overlapped and that reads were checked; and the checker's own tests, which show it can fail. The long run is
 * a command: `pnpm --filter @sluice/app-server chaos:cdc --seconds 180`.
 */
import { describe, expect, it } from 'vitest';
import { type CdcViolation, mirrorDiff, runCdcChaos } from '../chaos/cdc-driver.js';
import { CDC_FAULTS, CDC_OVERLAP_FAULTS } from '../chaos/cdc-faults.js';
import { ChangeFeedReplica, lsnIn } from '../chaos/cdc-feed.js';
import { CDC_DEFAULTS } from '../chaos/cdc-options.js';
import { type AccountRow, lsnValue, positionOf, wholeProblems } from '../chaos/cdc-readers.js';
import { formatCdcSummary } from '../chaos/cdc-report.js';
import type { AccountsWriter } from '../chaos/cdc-writer.js';
import { Rng } from '../chaos/options.js';

const rows = (n: number): AccountRow[] =>
  Array.from({ length: n }, (_, i) => ({ id: i + 1, balance: 100, note: `n${i + 1}`, txn: 0 }));

describe('CDC chaos checker', () => {
  it('a whole answer passes; half of a transfer, a row too many and a key twice fail', () => {
    const expected = { rows: 4, sum: 400 };
    expect(wholeProblems(rows(4), expected)).toEqual([]);
    // The first statement of a transfer (one balance down) without the second.
    const half = rows(4).map((r) => (r.id === 1 ? { ...r, balance: 60 } : r));
    expect(wholeProblems(half, expected)).toEqual(['balances sum to 360, expected 400']);
    // The insert of a delete + insert without its delete (a replaced account served twice, under two keys).
    expect(wholeProblems([...rows(4), { id: 9, balance: 100, note: 'from 1', txn: 1 }], expected)).toEqual([
      '5 rows, expected 4',
      'balances sum to 500, expected 400',
    ]);
    expect(wholeProblems([...rows(3), rows(3)[0]!], expected)).toEqual(['keys twice: 1']);
  });

  it('the final comparison names a missing key, a stale field and a key that should be gone', () => {
    const table = rows(3);
    expect(mirrorDiff(table, rows(3))).toEqual([]);
    const served = [{ ...table[0]!, note: 'old' }, table[2]!, { id: 7, balance: 0, note: null, txn: 2 }];
    expect(mirrorDiff(table, served)).toEqual([
      'key 1: table {"id":1,"balance":100,"note":"n1","txn":0}, served {"id":1,"balance":100,"note":"old","txn":0}',
      'key 2 missing: table has {"id":2,"balance":100,"note":"n2","txn":0}',
      'key 7 served but not in the table: {"id":7,"balance":0,"note":null,"txn":2}',
    ]);
  });

  it('positions order as LSNs do, across the 32-bit boundary', () => {
    expect(positionOf('accounts.source="1/0000A0"')).toBe('1/0000A0');
    expect(lsnValue('1/0') > lsnValue('0/FFFFFFFF')).toBe(true);
    expect(lsnValue('0/16B3748') < lsnValue('0/16B3749')).toBe(true);
  });
});

describe('CDC chaos change-feed checker', () => {
  const expected = { rows: 2, sum: 200 };
  const position = (lsn: string) => ({ 'accounts.source': { capture: 'replication', lsn } });
  const row = (id: number, balance: number, txn: number) => ({ id, balance, note: null, txn });
  /** A replica fed by hand: the snapshot of two accounts, then `live`. */
  const replica = () => {
    const violations: CdcViolation[] = [];
    const feed = new ChangeFeedReplica(
      'http://127.0.0.1:1',
      expected,
      new Rng(1),
      (v) => violations.push(v),
      () => [],
    );
    feed.apply({ type: 'upsert', key: [1], record: row(1, 100, 0) });
    feed.apply({ type: 'upsert', key: [2], record: row(2, 100, 0) });
    feed.apply({ type: 'live', generation: 'accounts-a', token: 't0' });
    return { feed, violations, kinds: () => violations.map((v) => v.kind) };
  };
  const commit = (lsn: string, token: string) =>
    ({ type: 'commit', position: position(lsn), epoch: 1, token }) as const;
  const writer = (seqs: number[]) => ({ writes: seqs.map((seq) => ({ seq })) }) as unknown as AccountsWriter;

  it('whole transactions in order pass; one split over two commits, replayed or missing fails', () => {
    const ok = replica();
    ok.feed.apply({ type: 'upsert', key: [1], record: row(1, 90, 1), token: 't1' });
    ok.feed.apply({ type: 'upsert', key: [2], record: row(2, 110, 1), token: 't2' });
    ok.feed.apply(commit('0/10', 't3'));
    ok.feed.apply({ type: 'upsert', key: [1], record: row(1, 80, 2), token: 't4' });
    ok.feed.apply({ type: 'upsert', key: [2], record: row(2, 120, 2), token: 't5' });
    ok.feed.apply(commit('0/20', 't6'));
    ok.feed.settleTransactions(writer([1, 2]));
    expect(ok.violations).toEqual([]);
    expect(ok.feed.matches([row(1, 80, 2), row(2, 120, 2)])).toBe(true);

    const split = replica();
    split.feed.apply({ type: 'upsert', key: [1], record: row(1, 90, 1), token: 't1' });
    split.feed.apply(commit('0/10', 't2'));
    expect(split.kinds()).toEqual(['feed: half-applied transaction']);

    const replayed = replica();
    for (const txn of [1, 2, 1]) {
      replayed.feed.apply({ type: 'upsert', key: [1], record: row(1, 100, txn), token: `u${txn}` });
      replayed.feed.apply(commit('0/10', `c${txn}`));
    }
    expect(replayed.kinds()).toEqual(['feed: older version applied', 'feed: transaction delivered twice']);

    const missing = replica();
    missing.feed.apply({ type: 'upsert', key: [1], record: row(1, 100, 3), token: 't1' });
    missing.feed.apply(commit('0/10', 't2'));
    missing.feed.settleTransactions(writer([1, 2, 3]));
    expect(missing.kinds()).toEqual(['feed: transactions missing']);

    // Transaction 1 came, but the writer's ledger says it rolled back.
    const uncommitted = replica();
    uncommitted.feed.apply({ type: 'upsert', key: [1], record: row(1, 100, 1), token: 't1' });
    uncommitted.feed.apply(commit('0/10', 't2'));
    uncommitted.feed.settleTransactions(writer([]));
    expect(uncommitted.kinds()).toEqual(['feed: uncommitted transaction']);
  });

  it('a commit position below an earlier one fails, across a switch too; a reset rebuilds the replica', () => {
    const back = replica();
    back.feed.apply(commit('0/20', 't1'));
    back.feed.apply({ type: 'switch', from: 'accounts-a', to: 'accounts-b', token: 't2' });
    back.feed.apply({ type: 'upsert', key: [1], record: row(1, 100, 0), token: 't3' });
    back.feed.apply(commit('0/1F', 't4'));
    expect(back.kinds()).toEqual(['feed: commit position went back']);
    expect(lsnIn(position('1/0'))).toBe('1/0');
    expect(lsnIn(null)).toBe(null);

    const reset = replica();
    reset.feed.apply({ type: 'reset', reason: 'retention' });
    reset.feed.apply({ type: 'upsert', key: [3], record: row(3, 150, 5) });
    reset.feed.apply({ type: 'upsert', key: [4], record: row(4, 50, 5) });
    reset.feed.apply({ type: 'live', generation: 'accounts-a', token: 't9' });
    expect(reset.violations).toEqual([]);
    expect(reset.feed.counts.resets).toEqual({ retention: 1 });
    expect(reset.feed.rows).toEqual([row(3, 150, 5), row(4, 50, 5)]);
  });
});

/**
 * Faithful and atomic under faults, in CI's size. A failing run prints its report, seed included (replay with
 * `pnpm --filter @sluice/app-server chaos:cdc --seconds 45 --seed <seed>`); SLUICE_CDC_CHAOS_SEED changes the seed.
 */
describe('CDC chaos run (CI size)', () => {
  it('every answer and every change-feed commit shows whole transactions, read-your-writes holds, and the mirror and the feed end equal to the table', async () => {
    const seed = Number(process.env.SLUICE_CDC_CHAOS_SEED ?? 20261206);
    const summary = await runCdcChaos({ ...CDC_DEFAULTS, seconds: 45, seed, overlap: true, verbose: false });
    const report = formatCdcSummary(summary);
    console.log(report);
    expect(summary.violations, report).toEqual([]);
    // The run really injected every kind of fault and checked reads (a quiet run would pass for the wrong reason).
    for (const kind of [...CDC_FAULTS, ...CDC_OVERLAP_FAULTS])
      expect(summary.faults[kind], `${kind}\n${report}`).toBeGreaterThan(0);
    // Faults overlapped, and a restart landed on a held COMMIT (the writer's ledger decided its fate).
    expect(summary.overlap?.overlapping ?? 0, report).toBeGreaterThan(0);
    expect(summary.commitRestarts.inCommit + summary.commitRestarts.afterCommit, report).toBeGreaterThan(0);
    expect(summary.transactions).toBeGreaterThan(100);
    expect(summary.reads.queries + summary.reads.counts).toBeGreaterThan(0);
    expect(summary.reads.lookups).toBeGreaterThan(0);
    expect(summary.finalRows).toBe(CDC_DEFAULTS.rows);
    // The change feed was followed through the faults: commits checked, a switch crossed, reconnects made.
    expect(summary.feed.checkedCommits, report).toBeGreaterThan(0);
    expect(summary.feed.switches, report).toBeGreaterThan(0);
    expect(summary.feed.reconnects + summary.feed.resumes, report).toBeGreaterThan(0);
  }, 600_000);
});
