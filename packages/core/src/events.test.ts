import { describe, expect, it } from 'vitest';
import { PipelineCheckpointSchema, PipelinePhase, RestartDecision } from './checkpoint.js';
import {
  AliasRedirectedSchema,
  aliasRedirected,
  SluiceEventSchema,
  SnapshottingDoneSchema,
  snapshottingDone,
} from './events.js';

const CHECKPOINT = {
  dag: 'dag-hash-1',
  epoch: 3,
  positions: { 'source:items': { offset: 1024 }, 'sink:items': 3 },
  at: '2026-12-02T10:00:00.000Z',
};

describe('PipelineCheckpointSchema', () => {
  it('accepts a checkpoint with opaque positions', () => {
    expect(PipelineCheckpointSchema.parse(CHECKPOINT)).toEqual(CHECKPOINT);
    expect(PipelineCheckpointSchema.parse({ ...CHECKPOINT, epoch: 0, positions: {} }).epoch).toBe(0);
  });

  it('refuses malformed checkpoints', () => {
    for (const bad of [
      { ...CHECKPOINT, dag: '' },
      { ...CHECKPOINT, epoch: -1 },
      { ...CHECKPOINT, epoch: 1.5 },
      { ...CHECKPOINT, epoch: '3' },
      { ...CHECKPOINT, positions: [] },
      { ...CHECKPOINT, positions: 'x' },
      { ...CHECKPOINT, at: 5 },
      { dag: 'x', epoch: 1, positions: {} },
      null,
      'checkpoint',
    ]) {
      expect(PipelineCheckpointSchema.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });

  it('names the phases and restart decisions', () => {
    expect(Object.values(PipelinePhase)).toEqual([
      'starting',
      'snapshotting',
      'streaming',
      'completed',
      'failed',
      'stopped',
    ]);
    expect(Object.values(RestartDecision)).toEqual(['resume', 'from-scratch']);
  });
});

describe('AliasRedirected', () => {
  it('builds and validates {host, alias, from, to, checkpoint, at}', () => {
    const given = { host: 'h1', alias: 'items', from: 'items-01', to: 'items-02', checkpoint: CHECKPOINT };
    const event = aliasRedirected(given);
    expect(event).toMatchObject({ type: 'AliasRedirected', ...given });
    expect(Number.isNaN(Date.parse(event.at))).toBe(false);
    expect(AliasRedirectedSchema.parse(event)).toEqual(event);
    expect(SluiceEventSchema.parse(event)).toEqual(event);
  });

  it('keeps a given timestamp and version, and allows a first redirect without checkpoint', () => {
    const given = {
      host: 'h1',
      alias: 'items',
      from: null,
      to: 'items-01',
      checkpoint: null,
      version: 1,
      at: '2026-12-02T10:00:00.000Z',
    };
    const event = aliasRedirected(given);
    expect(event).toEqual({ type: 'AliasRedirected', ...given });
    expect(SluiceEventSchema.parse(JSON.parse(JSON.stringify(event)))).toEqual(event);
  });

  it('refuses malformed events from the wire', () => {
    const good = aliasRedirected({
      host: 'h1',
      alias: 'a',
      from: null,
      to: 'b',
      checkpoint: null,
      at: 'now',
    });
    for (const bad of [
      { ...good, host: undefined },
      { ...good, host: '' },
      { ...good, alias: '' },
      { ...good, alias: 'x'.repeat(513) },
      { ...good, to: null },
      { ...good, from: 5 },
      { ...good, checkpoint: { dag: 'x' } },
      { ...good, version: -1 },
      { ...good, at: undefined },
      { ...good, type: 'AliasMoved' },
    ]) {
      expect(SluiceEventSchema.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });

  it('drops unknown fields of newer publishers instead of failing (forward compatible)', () => {
    const withExtra = {
      ...aliasRedirected({ host: 'h1', alias: 'a', from: null, to: 'b', checkpoint: null }),
      newField: 1,
    };
    const parsed = SluiceEventSchema.parse(withExtra);
    expect('newField' in parsed).toBe(false);
  });
});

describe('defect 7: alias events of different hosts collide', () => {
  it('an event names its host; one built without it cannot go on the wire until its host is stamped', () => {
    const unstamped = aliasRedirected({ alias: 'a', from: null, to: 'b', checkpoint: null });
    expect(SluiceEventSchema.safeParse(unstamped).success).toBe(false);
    expect(SluiceEventSchema.parse({ ...unstamped, host: 'h2' })).toMatchObject({ host: 'h2', alias: 'a' });
  });
});

describe('SnapshottingDone', () => {
  it('builds and validates', () => {
    const event = snapshottingDone({ endpoint: 'items', cache: 'items-02', source: 'file:items' });
    expect(event.type).toBe('SnapshottingDone');
    expect(SnapshottingDoneSchema.parse(event)).toEqual(event);
    expect(SluiceEventSchema.parse(event)).toEqual(event);
    expect(snapshottingDone({ endpoint: 'e', cache: 'c', source: 's', at: 'x' }).at).toBe('x');
  });

  it('refuses missing or empty members', () => {
    const good = snapshottingDone({ endpoint: 'e', cache: 'c', source: 's' });
    for (const key of ['endpoint', 'cache', 'source', 'at'] as const) {
      expect(SluiceEventSchema.safeParse({ ...good, [key]: undefined }).success, key).toBe(false);
    }
    expect(SluiceEventSchema.safeParse({ ...good, cache: '' }).success).toBe(false);
  });
});

describe('SluiceEventSchema', () => {
  it('refuses unknown event types and non-objects', () => {
    for (const bad of [{ type: 'Unknown' }, {}, null, 'AliasRedirected', [], { type: '__proto__' }]) {
      expect(SluiceEventSchema.safeParse(bad).success).toBe(false);
    }
  });
});
