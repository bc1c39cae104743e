/**
 * The chaos run of the PostgreSQL mirror in CI's size (about 45 s of overlapping faults: app-server SIGKILL and
 * SIGSTOP past wal_sender_timeout, PostgreSQL fast restarts — also while the app-server is frozen and inside or just
 * after a held COMMIT — api-server SIGKILL, also as the alias switches, blue/green rebuilds with an app-server kill
 * while the green builds) with a fixed seed, asserting zero violations, that every kind of fault happened, that
 * faults overlapped and that reads were checked; and the checker's own tests, which show it can fail. The long run is
 * a command: `pnpm --filter @sluice/app-server chaos:cdc --seconds 180`.
 */
import { describe, expect, it } from 'vitest';
import { mirrorDiff, runCdcChaos } from '../chaos/cdc-driver.js';
import { CDC_FAULTS, CDC_OVERLAP_FAULTS } from '../chaos/cdc-faults.js';
import { CDC_DEFAULTS } from '../chaos/cdc-options.js';
import { type AccountRow, lsnValue, positionOf, wholeProblems } from '../chaos/cdc-readers.js';
import { formatCdcSummary } from '../chaos/cdc-report.js';

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

/**
 * Faithful and atomic under faults, in CI's size. A failing run prints its report, seed included (replay with
 * `pnpm --filter @sluice/app-server chaos:cdc --seconds 45 --seed <seed>`); SLUICE_CDC_CHAOS_SEED changes the seed.
 */
describe('CDC chaos run (CI size)', () => {
  it('every answer shows whole transactions, read-your-writes holds, and the mirror ends equal to the table', async () => {
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
  }, 600_000);
});
