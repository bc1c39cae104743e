import type { FieldIssue, TransferRequest } from '@sluice/core';
import { postgresCapture, ValidationError } from '@sluice/core';

/**
 * Fields of a PostgreSQL address that only a source reads: a destination writes a `table` by its key, so a
 * `query`, a `cursor` or replication settings there would be ignored (or, for `query`, fail the run).
 */
const POSTGRES_SOURCE_ONLY = ['query', 'cursor', 'capture', 'slot', 'publication', 'heartbeat'] as const;

/**
 * What the wire schema cannot see, checked before anything is written: a request that can never run (a
 * `query` source without the `key` its keyset pages need), one that names a field the node would silently
 * ignore (source-only fields on a destination), or one nothing could stop or clean up after (a fire-and-forget
 * `follow`, or a fire-and-forget replication source whose slot outlives a crash). Refused as `VALIDATION_FAILED`
 * with the failing paths, so bad input never becomes a stored transfer that FAILs later — the same as a field the
 * schema refuses.
 */
export function checkRequestShape(request: TransferRequest): void {
  const issues: FieldIssue[] = [];
  const { source, destination } = request;
  if (source.type === 'postgres' && source.query !== undefined && source.key === undefined)
    issues.push({
      path: 'source.key',
      message: 'A "query" source needs "key" (the column or columns its rows are paged and resumed by)',
    });
  if (destination.type === 'postgres') {
    for (const field of POSTGRES_SOURCE_ONLY)
      if (destination[field] !== undefined)
        issues.push({
          path: `destination.${field}`,
          message:
            field === 'query'
              ? 'A PostgreSQL destination writes a "table"; "query" is for sources'
              : `"${field}" belongs to a PostgreSQL source; a destination does not read it`,
        });
  }
  if (destination.type === 'file' && destination.follow !== undefined)
    issues.push({ path: 'destination.follow', message: '"follow" belongs to a file source' });
  // A replication source creates a slot and a publication on the source database, dropped once the transfer's end
  // is recorded. A fire-and-forget run has no record: if its node dies, nothing ever drops them, and the slot
  // holds the source's WAL for good.
  if (
    request.mode === 'fire-and-forget' &&
    source.type === 'postgres' &&
    postgresCapture(source, 'transfer') === 'replication'
  )
    issues.push({
      path: 'source.capture',
      message:
        'A replication source leaves a slot on the source database that only a recorded transfer drops after a crash: send it with mode "idempotent", or read the table with capture "poll"',
    });
  // A following transfer never ends on its own: only terminate stops it, and terminate finds a transfer by its
  // record. A fire-and-forget one has none, so it would run, holding a fire-and-forget place, until the node shut
  // down.
  if (request.mode === 'fire-and-forget' && request.options.follow === true)
    issues.push({
      path: 'options.follow',
      message:
        'A following transfer only ends when terminated, which needs its record: send it with mode "idempotent"',
    });
  if (issues.length > 0) throw invalid(issues);
}

/**
 * A file transfer whose destination is its source (their real paths, so through `..` or a symlink too): the
 * publishing rename would replace the file being read — in another format, the source's data is gone; with
 * `follow`, the run would read its own output. Called with confined (real) paths.
 */
export function checkDistinctFiles(confined: TransferRequest): void {
  const { source, destination } = confined;
  if (source.type === 'file' && destination.type === 'file' && source.path === destination.path)
    throw invalid([
      {
        path: 'destination.path',
        message: 'It is the source file; a transfer cannot write over the file it reads',
      },
    ]);
}

function invalid(issues: FieldIssue[]): ValidationError {
  const detail = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
  return new ValidationError(`Invalid transfer request: ${detail}`, issues);
}
