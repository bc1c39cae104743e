/** The printed form of a CDC chaos run: counts first, then each violation with its evidence. */
import type { CdcSummary } from './cdc-driver.js';

const list = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([kind, n]) => `${kind} ${n}`)
    .join(', ');

export function formatCdcSummary(summary: CdcSummary, evidenceLines = 40): string {
  const r = summary.reads;
  const f = summary.feed;
  const out = [
    `cdc chaos seed ${summary.seed}: ${summary.rows} accounts, ${summary.seconds} s of faults, ${(summary.durationMs / 1000).toFixed(0)} s in all, started ${summary.startedAt}`,
    `  code: ${summary.code}`,
    `  transactions: ${summary.transactions} (${list(summary.writes)}); connection lost ${summary.connectionLosses} times, ${summary.uncertainCommits} of those had committed`,
    `  faults: ${list(summary.faults)}; process crashes ${summary.crashes}`,
    summary.overlap
      ? `  overlaps: ${summary.overlap.overlapping} faults started while another ran, ${summary.overlap.withinASecond} within a second of the previous; pairs {${list(summary.overlap.pairs)}}`
      : '  overlaps: none (one fault at a time)',
    `  restarts at a held COMMIT: inside ${summary.commitRestarts.inCommit}, after it ${summary.commitRestarts.afterCommit}, not reached ${summary.commitRestarts.missed}`,
    `  reads checked: queries ${r.queries} (with sluice-min-position ${r.freshQueries}), counts ${r.counts}, read-your-writes lookups ${r.lookups}; 503 POSITION_NOT_REACHED ${r.positionNotReached}, other 503 {${list(r.unavailable)}}, no answer ${r.noAnswer}; sluice-position went back ${r.positionWentBack} times`,
    `  change feed: ${f.events} events (${f.upserts} upserts, ${f.deletes} deletes), ${f.commits} commits checked whole, ${f.transactions} source transactions in order (${f.multiTransactionCommits} commits held more than one), ${f.snapshots} snapshots; switches seen ${f.switches}; resets {${list(f.resets)}}; connections lost ${f.connectionsLost}, reconnected ${f.reconnects}; own drops resumed by id ${f.resumes} (${f.resumesInSwitch} in a switch)`,
    `  alias switches by cause: {${list(summary.switches)}}`,
    `  final comparison: ${summary.finalRows} rows`,
    `  violations: ${summary.violations.length}`,
  ];
  const byKind = new Map<string, number>();
  for (const v of summary.violations) byKind.set(v.kind, (byKind.get(v.kind) ?? 0) + 1);
  for (const [kind, n] of byKind) out.push(`    ${kind}: ${n}`);
  for (const v of summary.violations) {
    out.push('', `VIOLATION ${v.kind}: ${v.detail}`);
    for (const line of v.evidence.slice(-evidenceLines)) out.push(`    ${line}`);
  }
  if (summary.notes.length > 0)
    out.push('', `notes (${summary.notes.length}):`, ...summary.notes.map((n) => `  ${n}`));
  if (summary.violations.length > 0) out.push('', `logs and timeline kept in ${summary.dir}`);
  return out.join('\n');
}
