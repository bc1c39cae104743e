import { describe, expect, it } from 'vitest';
import { parseMinPosition, unreachablePosition } from './freshness.js';

const checkpoint = (positions: Record<string, unknown>) => ({ dag: 'd', epoch: 1, positions, at: 'x' });

describe('unreachablePosition', () => {
  it('defect: an unknown source in sluice-min-position was answered listing the sink (items.cache) among the sources to wait for', () => {
    // What an endpoint fed by logical replication commits: its source's LSN and its cache sink's own position.
    const committed = checkpoint({ 'items.source': { lsn: '0/16B3748' }, 'items.cache': { epoch: 4 } });
    const reason = unreachablePosition(committed, parseMinPosition('other.source="0/1"'));
    expect(reason).toBe(
      'the endpoint has no source "other.source" (the sources a sluice-min-position can name: items.source)',
    );
    // A polled endpoint has no source a position can name.
    const polled = checkpoint({ 'items.source': { cursor: [4] }, 'items.cache': { epoch: 4 } });
    expect(unreachablePosition(polled, parseMinPosition('other.source="0/1"'))).toBe(
      'the endpoint has no source "other.source" (none of its sources has an LSN position)',
    );
    expect(unreachablePosition(committed, parseMinPosition('items.source="0/1"'))).toBeNull();
  });
});
