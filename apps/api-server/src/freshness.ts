/**
 * The freshness contract (docs/architecture.md § Protocol 2; docs/http-api.md, freshness): data responses carry `sluice-position`, an RFC 8941 dictionary of
 * source handle → the position the answering generation committed (an LSN for replication sources, as an
 * sf-string); a request may send `sluice-min-position` (same syntax, or a bare LSN for a one-source endpoint) and
 * is answered once the serving generation has committed at least that far.
 */
import { type PipelineCheckpoint, ValidationError } from '@sluice/core';

/** Response header: what the answering generation has committed, per source. */
export const POSITION_HEADER = 'sluice-position';
/** Request header: answer only once the serving generation has committed at least this. */
export const MIN_POSITION_HEADER = 'sluice-min-position';

const LSN = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;
/** An RFC 8941 key: lower-case letter or `*`, then lower-case letters, digits, `_`, `-`, `.`, `*`. */
const KEY = /^[a-z*][a-z0-9_\-.*]*$/;

/** Whether `text` is a PostgreSQL LSN as positions carry it (`0/16B3748`). */
export function isLsn(text: string): boolean {
  return LSN.test(text);
}

function lsnValue(text: string): bigint | null {
  const match = LSN.exec(text);
  return match ? (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`) : null;
}

/** Source handle → LSN (text) of every replication source position in a checkpoint. */
export function positionsOf(checkpoint: PipelineCheckpoint | null): Map<string, string> {
  const out = new Map<string, string>();
  if (!checkpoint) return out;
  for (const [handle, position] of Object.entries(checkpoint.positions)) {
    const lsn = (position as { lsn?: unknown } | null)?.lsn;
    if (typeof lsn === 'string' && LSN.test(lsn) && KEY.test(handle.toLowerCase()))
      out.set(handle.toLowerCase(), lsn);
  }
  return out;
}

/**
 * The `sluice-position` value for a checkpoint (`items.source="0/16B3748"`), or null when it holds no position
 * this contract names (no replication source, or nothing committed yet).
 *
 * @example
 * ```ts
 * formatPositionHeader(checkpoint); // 'items.source="0/16B3748"'
 * ```
 */
export function formatPositionHeader(checkpoint: PipelineCheckpoint | null): string | null {
  const positions = positionsOf(checkpoint);
  if (positions.size === 0) return null;
  return [...positions].map(([handle, lsn]) => `${handle}="${lsn}"`).join(', ');
}

/** What a request asked for: source handle (or `null`: the endpoint's only source) → LSN. */
export type MinPosition = Map<string | null, bigint>;

function invalid(detail: string): ValidationError {
  return new ValidationError(`Invalid ${MIN_POSITION_HEADER}: ${detail}`, [
    { path: `headers.${MIN_POSITION_HEADER}`, message: detail },
  ]);
}

/**
 * Parses `sluice-min-position`: a bare LSN (`0/16B3748`, the endpoint's only source) or a dictionary whose members
 * are sf-strings holding LSNs (`items.source="0/16B3748", other.source="1/0"`). Anything else is a 400
 * `VALIDATION_FAILED` naming what is wrong, never ignored.
 */
export function parseMinPosition(header: string): MinPosition {
  const text = header.trim();
  if (text.length > 4096) throw invalid('longer than 4096 characters');
  const out: MinPosition = new Map();
  const bare = lsnValue(text);
  if (bare !== null) {
    out.set(null, bare);
    return out;
  }
  for (const member of text.split(',')) {
    const part = member.trim();
    const eq = part.indexOf('=');
    if (eq <= 0) throw invalid(`"${part.slice(0, 64)}" is not key="position"`);
    const key = part.slice(0, eq);
    const raw = part.slice(eq + 1);
    if (!KEY.test(key)) throw invalid(`"${key.slice(0, 64)}" is not a dictionary key (lower-case)`);
    const match = /^"([^"\\]*)"$/.exec(raw);
    const lsn = match ? lsnValue(match[1]!) : null;
    if (lsn === null) throw invalid(`the value of ${key} is not a quoted LSN such as "0/16B3748"`);
    out.set(key, lsn);
  }
  if (out.size === 0) throw invalid('empty');
  return out;
}

/**
 * Whether a generation's checkpoint has reached what was asked: every named source at or past its LSN (a source
 * the endpoint does not have never is); a bare position names the endpoint's only replication source.
 */
export function positionReached(checkpoint: PipelineCheckpoint | null, wanted: MinPosition): boolean {
  const have = positionsOf(checkpoint);
  for (const [handle, lsn] of wanted) {
    let current: string | undefined;
    if (handle === null) {
      if (have.size !== 1) return false;
      current = [...have.values()][0];
    } else current = have.get(handle);
    if (current === undefined) return false;
    const value = lsnValue(current);
    if (value === null || value < lsn) return false;
  }
  return true;
}

/**
 * Why a committed generation can never reach `wanted`, or null when it may: a named source the checkpoint does not
 * have, or a source whose position is no LSN (only logical replication sources have one; a file or a polled table
 * has offsets or cursors). Waiting for those would end in a 503 every time.
 */
export function unreachablePosition(
  checkpoint: PipelineCheckpoint | null,
  wanted: MinPosition,
): string | null {
  if (checkpoint === null) return null; // nothing committed yet: its positions are unknown
  const positions = new Map(
    Object.entries(checkpoint.positions).map(([handle, p]) => [handle.toLowerCase(), p]),
  );
  const lsns = positionsOf(checkpoint);
  const noLsn = (which: string) =>
    `${which} has no LSN position (only logical replication sources do), so no sluice-min-position can be reached`;
  for (const handle of wanted.keys()) {
    if (handle === null) {
      // A source not positioned yet may still be a replication source.
      if (lsns.size === 0 && positions.size > 0 && [...positions.values()].every((p) => p !== null))
        return noLsn("the endpoint's source");
      continue;
    }
    // Only the handles a position can name are listed: the checkpoint also holds its sinks' positions.
    if (!positions.has(handle))
      return `the endpoint has no source "${handle}" (${
        lsns.size > 0
          ? `the sources a sluice-min-position can name: ${[...lsns.keys()].join(', ')}`
          : 'none of its sources has an LSN position'
      })`;
    if (positions.get(handle) !== null && !lsns.has(handle)) return noLsn(`source "${handle}"`);
  }
  return null;
}

/** True when a bare position was sent to an endpoint with other than one replication source (it cannot apply). */
export function bareMismatch(checkpoint: PipelineCheckpoint | null, wanted: MinPosition): boolean {
  return wanted.has(null) && checkpoint !== null && positionsOf(checkpoint).size > 1;
}

/**
 * Refuses `sluice-min-position` on a route that reads no single endpoint (`GET /v1/endpoints`): a position names
 * one endpoint's sources, and the list answers at once for every endpoint, so answering 200 would claim a wait that
 * never happened. The request is pointed at the endpoint's own route, which waits. No header: nothing to refuse.
 *
 * @example
 * ```ts
 * refuseMinPosition(request.headers[MIN_POSITION_HEADER], 'GET /v1/endpoints'); // throws VALIDATION_FAILED (400)
 * ```
 */
export function refuseMinPosition(header: string | string[] | undefined, route: string): void {
  if (header === undefined) return;
  const message = `not taken by ${route} (a position names one endpoint's sources): send it to GET /v1/endpoints/{name}, which waits for it`;
  throw new ValidationError(`Invalid ${MIN_POSITION_HEADER}: ${message}`, [
    { path: `headers.${MIN_POSITION_HEADER}`, message },
  ]);
}
