import type { SluiceConfig } from '@sluice/core';
import { dropSlots, listSlots, type SlotRow, type SlotTarget } from './replication-slots.js';

const MB = 1024 * 1024;

function table(rows: SlotRow[]): string {
  const head = ['SLOT', 'CONNECTION', 'USE', 'ENDPOINT', 'ACTIVE', 'CONFIRMED', 'RETAINED', 'WAL'];
  const body = rows.map((r) => [
    r.slot,
    r.connection,
    r.use,
    r.endpoint ?? '-',
    r.active ? `yes (${r.activePid})` : 'no',
    r.confirmedFlushLsn ?? '-',
    r.retainedBytes === null ? '-' : `${(r.retainedBytes / MB).toFixed(1)} MB`,
    r.walStatus ?? '-',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => row[i]!.length)));
  return [head, ...body]
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/**
 * `sluice-app-server slots list`: prints the slots (a table, or `--json`). Exit code 0, or 1 when a configured
 * connection could not be asked (the rest is still printed).
 */
export async function runSlotsList(
  config: SluiceConfig,
  options: { connection?: string; json?: boolean },
): Promise<number> {
  const listing = await listSlots(
    config,
    options.connection !== undefined ? { connection: options.connection } : {},
  );
  if (options.json) process.stdout.write(`${JSON.stringify(listing, null, 2)}\n`);
  else if (listing.slots.length === 0) process.stdout.write('no logical replication slots\n');
  else process.stdout.write(`${table(listing.slots)}\n`);
  for (const { connection, message } of listing.unreachable)
    process.stderr.write(`sluice-app-server: connection ${connection} could not be asked: ${message}\n`);
  return listing.unreachable.length > 0 ? 1 : 0;
}

/**
 * `sluice-app-server slots drop <slot> | --endpoint <name> | --orphaned`: drops and prints what it dropped.
 * Refusals (`UNKNOWN_SLOT`, `SLOT_ACTIVE`, `SLOT_NOT_OWNED`) are thrown: the CLI prints their code, exit 1.
 * A command naming no target, or several, is a usage error (exit 2).
 */
export async function runSlotsDrop(
  config: SluiceConfig,
  slot: string | undefined,
  options: { endpoint?: string; orphaned?: boolean; connection?: string; json?: boolean },
): Promise<number> {
  const targets: SlotTarget[] = [
    ...(slot !== undefined ? [{ kind: 'slot', slot } as const] : []),
    ...(options.endpoint !== undefined ? [{ kind: 'endpoint', endpoint: options.endpoint } as const] : []),
    ...(options.orphaned ? [{ kind: 'orphaned' } as const] : []),
  ];
  if (targets.length !== 1) {
    process.stderr.write(
      'sluice-app-server: slots drop needs exactly one of <slot>, --endpoint <name>, --orphaned\n',
    );
    return 2;
  }
  const dropped = await dropSlots(
    config,
    targets[0]!,
    options.connection !== undefined ? { connection: options.connection } : {},
  );
  if (options.json) process.stdout.write(`${JSON.stringify({ dropped }, null, 2)}\n`);
  else if (dropped.length === 0) process.stdout.write('no orphaned replication slots\n');
  else
    for (const d of dropped)
      process.stdout.write(
        `dropped slot ${d.slot} and publication ${d.publication} (connection ${d.connection})\n`,
      );
  return 0;
}
