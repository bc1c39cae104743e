import { LagUnit, type SourceAddress } from '@sluice/core';

/**
 * What the `lag` of an endpoint fed by `source` counts, as `@sluice/pipeline`'s sources measure it: the file source
 * its file's size less the offset read to (`sources/file.ts`), the JetStream source the stream's last sequence less
 * the one read to (`sources/jetstream.ts`). PostgreSQL sources report no `lag` (a replication source's lag, bytes of
 * WAL and seconds, is in the endpoint's `replication`).
 *
 * @example
 * ```ts
 * lagUnitOf({ type: 'file', path: './data/items.jsonl', format: 'jsonl' }); // 'bytes'
 * ```
 */
export function lagUnitOf(source: SourceAddress): LagUnit | null {
  switch (source.type) {
    case 'file':
      return LagUnit.bytes;
    case 'jetstream':
      return LagUnit.messages;
    case 'postgres':
      return null;
  }
}
