import { ValidationError } from '@sluice/core';

/**
 * PostgreSQL log sequence numbers (`16/B374D848`): 64-bit WAL positions written as two hex halves. Compared as
 * bigints; formatted the way PostgreSQL prints them (upper-case hex, no padding), so a checkpointed LSN reads
 * the same in `pg_replication_slots`.
 */
const LSN = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** Parses `X/Y`; throws `VALIDATION_FAILED` on anything else. */
export function parseLsn(text: string): bigint {
  const match = LSN.exec(text);
  if (!match)
    throw new ValidationError(`Not an LSN: ${JSON.stringify(String(text).slice(0, 40))}`, [
      { path: 'lsn', message: 'expected two hexadecimal halves, e.g. 16/B374D848' },
    ]);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

/** Formats a 64-bit position as `X/Y`. */
export function formatLsn(value: bigint): string {
  const high = (value >> 32n) & 0xffffffffn;
  const low = value & 0xffffffffn;
  return `${high.toString(16).toUpperCase()}/${low.toString(16).toUpperCase()}`;
}

/** `-1`, `0` or `1` as `a` is before, at or after `b`. */
export function compareLsn(a: string, b: string): number {
  const x = parseLsn(a);
  const y = parseLsn(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** The later of two LSNs. */
export function maxLsn(a: string, b: string): string {
  return compareLsn(a, b) >= 0 ? normalizeLsn(a) : normalizeLsn(b);
}

/** The same LSN in PostgreSQL's spelling. */
export function normalizeLsn(text: string): string {
  return formatLsn(parseLsn(text));
}

/** True for a well-formed LSN. */
export function isLsn(text: unknown): text is string {
  return typeof text === 'string' && LSN.test(text);
}

/** One byte earlier (saturating at 0). */
export function previousLsn(text: string): string {
  const value = parseLsn(text);
  return formatLsn(value > 0n ? value - 1n : 0n);
}

/** Bytes from `from` to `to` (0 when `to` is not after `from`). */
export function lsnDistance(from: string, to: string): number {
  const delta = parseLsn(to) - parseLsn(from);
  return delta > 0n ? Number(delta) : 0;
}
