/** The printed form of a run: counts first (what a CI log shows at a glance), then each violation with evidence. */
import type { ChaosSummary } from './driver.js';

export function formatSummary(summary: ChaosSummary, evidenceLines = 40): string {
  const c = summary.counts;
  const states = Object.entries(summary.states)
    .sort()
    .map(([state, n]) => `${state} ${n}`)
    .join(', ');
  const out = [
    `chaos seed ${summary.seed}: ${summary.transfers} transfers, ${summary.seconds} s of faults, ${(summary.durationMs / 1000).toFixed(0)} s in all, started ${summary.startedAt}`,
    `  code: ${summary.code}`,
    `  final states: ${states}`,
    `  faults: pauses ${c.pauses}, kills ${c.kills}, graceful stops ${c.gracefulStops}, node restarts ${c.restarts}, nats restarts ${c.natsRestarts}, node crashes ${c.nodeCrashes}`,
    `  requests: submits ${c.submits}, resubmits ${c.resubmits}, terminates sent ${c.terminatesSent} (TERMINATED reported ${c.terminatesReported})`,
    `  violations: ${summary.violations.length}`,
  ];
  const byKind = new Map<string, number>();
  for (const v of summary.violations) byKind.set(v.kind, (byKind.get(v.kind) ?? 0) + 1);
  for (const [kind, n] of byKind) out.push(`    ${kind}: ${n}`);
  for (const v of summary.violations) {
    out.push('', `VIOLATION ${v.kind}${v.transfer ? ` ${v.transfer}` : ''}: ${v.detail}`);
    for (const line of v.evidence.slice(-evidenceLines)) out.push(`    ${line}`);
  }
  if (summary.notes.length > 0)
    out.push('', `notes (${summary.notes.length}):`, ...summary.notes.map((n) => `  ${n}`));
  if (summary.violations.length > 0)
    out.push('', `node logs, timeline and per-transfer requests kept in ${summary.dir}`);
  return out.join('\n');
}
