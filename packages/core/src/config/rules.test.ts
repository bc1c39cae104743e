import { describe, expect, it } from 'vitest';
import { ConfigError } from '../errors.js';
import { resolveConfig } from './resolve.js';

function issues(raw: unknown) {
  try {
    resolveConfig(raw);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).errors;
  }
  throw new Error('expected the configuration to be refused');
}

const ITEMS = { name: 'items', source: { type: 'file', path: './items.jsonl' }, primaryKey: ['id'] };
const PG = (connection: string) => ({
  name: 'orders',
  source: { type: 'postgres', connection, table: 'orders' },
  primaryKey: ['id'],
});

describe('cross-field rules (config/rules.ts)', () => {
  it('an endpoint key and indexes name declared fields', () => {
    expect(
      issues({ endpoints: [{ ...ITEMS, fields: { name: 'string' }, indexes: [['name', 'x']] }] }),
    ).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"id" is not in fields' },
      { path: 'endpoints[0].indexes[0][1]', message: '"x" is not in fields' },
    ]);
    expect(resolveConfig({ endpoints: [{ ...ITEMS, fields: { id: 'integer' } }] }).endpoints).toHaveLength(1);
  });

  it('defect: --check passed endpoints whose cache schema the pipeline then refused (a field listed twice, a duplicate index, a json key field)', () => {
    expect(
      issues({
        endpoints: [
          { ...ITEMS, primaryKey: ['id', 'id'] },
          { ...ITEMS, name: 'b', indexes: [['value'], ['value'], ['category', 'category']] },
          { ...ITEMS, name: 'c', primaryKey: ['tags'], fields: { tags: 'json' } },
        ],
      }),
    ).toEqual([
      { path: 'endpoints[0].primaryKey', message: '"id" is listed twice' },
      { path: 'endpoints[1].indexes[1]', message: 'duplicate index (as indexes[0])' },
      { path: 'endpoints[1].indexes[2]', message: '"category" is listed twice' },
      { path: 'endpoints[2].primaryKey[0]', message: '"tags" has type json, which cannot be part of a key' },
    ]);
  });

  it('defect: a renaming projection that dropped the primary key passed --check (every record then lacked its key)', () => {
    expect(issues({ endpoints: [{ ...ITEMS, select: { v: 'value' } }] })).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"id" is not selected' },
    ]);
    // Renamed into the key is selected.
    expect(
      resolveConfig({ endpoints: [{ ...ITEMS, select: { id: 'sku', v: 'value' } }] }).endpoints,
    ).toHaveLength(1);
  });

  it('a list projection keeps the primary key', () => {
    expect(issues({ endpoints: [{ ...ITEMS, select: ['name'] }] })).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"id" is not selected' },
    ]);
  });

  it('endpoint names are unique', () => {
    expect(issues({ endpoints: [ITEMS, ITEMS] })).toEqual([
      { path: 'endpoints[1].name', message: 'duplicate endpoint "items"' },
    ]);
  });

  it('an endpoint source names a configured connection of the right type', () => {
    expect(issues({ endpoints: [PG('warehouse')] })).toEqual([
      {
        path: 'endpoints[0].source.connection',
        message: 'no connection named "warehouse" in connections (defined: none)',
      },
    ]);
    expect(
      issues({
        connections: { warehouse: { type: 'nats', nats: 'nats://x' } },
        endpoints: [PG('warehouse')],
      }),
    ).toEqual([
      {
        path: 'endpoints[0].source.connection',
        message: 'connection "warehouse" is of type nats; a postgres source needs a postgres connection',
      },
    ]);
    const ok = {
      connections: { warehouse: { type: 'postgres', url: 'postgres://x' } },
      endpoints: [PG('warehouse')],
    };
    expect(resolveConfig(ok).endpoints[0]?.name).toBe('orders');
  });

  it('backplane.strategy nats needs a nats connection', () => {
    expect(issues({ backplane: { strategy: 'nats' } })).toEqual([
      { path: 'nats', message: 'required when backplane.strategy is "nats"' },
    ]);
    expect(resolveConfig({ backplane: { strategy: 'nats' }, nats: 'nats://x' }).backplane.strategy).toBe(
      'nats',
    );
  });

  it('backplane.strategy single needs the embedded SQLite store', () => {
    expect(issues({ backplane: { strategy: 'single' }, store: 'postgres://db/sluice' })).toEqual([
      { path: 'backplane.strategy', message: '"single" needs a sqlite: store; use "direct" or "nats"' },
    ]);
    expect(resolveConfig({ backplane: { strategy: 'single' } }).backplane.strategy).toBe('single');
  });

  it('transfers.heartbeatMs is shorter than transfers.leaseMs', () => {
    expect(issues({ transfers: { leaseMs: 1000, heartbeatMs: 1000 } })).toEqual([
      { path: 'transfers.heartbeatMs', message: 'must be less than transfers.leaseMs (1000)' },
    ]);
    // Written under the old keys, the same rule blames the key as written.
    expect(issues({ limits: { leaseMs: 1000, heartbeatMs: 1000 } })).toEqual([
      { path: 'limits.heartbeatMs', message: 'must be less than transfers.leaseMs (1000)' },
    ]);
    expect(resolveConfig({ transfers: { leaseMs: 1000, heartbeatMs: 999 } }).transfers.heartbeatMs).toBe(999);
  });

  it('rules across sections judge valid sections only (one report per mistake)', () => {
    expect(issues({ transfers: { leaseMs: 10 }, backplane: { strategy: 'nats' } })).toEqual([
      { path: 'transfers.leaseMs', message: expect.stringMatching(/>=500/) },
    ]);
  });
});
