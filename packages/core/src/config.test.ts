import { describe, expect, it } from 'vitest';
import { thrown } from '../test/helpers.js';
import {
  ConnectionConfigSchema,
  ControlAuthSchema,
  ENV_OVERRIDES,
  EndpointConfigSchema,
  FieldType,
  FieldTypeSchema,
  HttpConfigSchema,
  NatsConfigSchema,
  QueryConfigSchema,
  queryLimitsOf,
  RetentionConfigSchema,
  resolveConfig,
  SluiceConfigSchema,
  SWITCH_DEFAULTS,
  TransfersConfigSchema,
} from './config.js';
import { ConfigError, SluiceError } from './errors.js';
import { DEFAULT_QUERY_LIMITS } from './query.js';

/** The issues of a configuration that must be refused as CONFIG_INVALID. */
function configIssues(raw: unknown, env: Record<string, string | undefined> = {}) {
  const err = thrown(() => resolveConfig(raw, env));
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as ConfigError).code).toBe('CONFIG_INVALID');
  expect((err as ConfigError).status).toBe(500);
  return (err as ConfigError).errors;
}

function configPaths(raw: unknown, env: Record<string, string | undefined> = {}): string[] {
  return [...new Set(configIssues(raw, env).map((e) => e.path))];
}

const ITEMS = { name: 'items', source: { type: 'file', path: './data/items.jsonl' }, primaryKey: ['id'] };
const withEndpoint = (patch: Record<string, unknown>) => ({ endpoints: [{ ...ITEMS, ...patch }] });

describe('resolveConfig: defaults', () => {
  const EXPECTED_DEFAULTS = {
    node: { id: 'local', host: '127.0.0.1', port: 7070, advertisedUrl: 'http://127.0.0.1:7070' },
    cluster: { name: 'sluice' },
    store: 'sqlite:./.sluice/store.db',
    backplane: { strategy: 'auto', connectWaitMs: 30_000 },
    dataDir: './.sluice',
    files: { roots: [] },
    connections: {},
    api: {
      host: '127.0.0.1',
      port: 8080,
      reconcileMs: 5000,
      freshnessWaitMs: 2000,
      changes: {
        heartbeatMs: 15_000,
        bufferBytes: 4 * 1024 * 1024,
        pollMs: 5,
        maxSubscribers: 10_000,
        maxPerClient: 100,
      },
    },
    control: { maxStreams: 256, maxStreamsPerClient: 16 },
    transfers: {
      maxConcurrentTransfers: 4,
      queueSize: 100,
      fireAndForgetConcurrency: 8,
      leaseMs: 15_000,
      heartbeatMs: 5_000,
      ownerWaitMs: 2_000,
      sweepIntervalMs: 5_000,
      shutdownGraceMs: 10_000,
    },
    http: { bodyBytes: 1_048_576, pageSizeMax: 500, drainDelayMs: 1_000 },
    query: { maxLimit: 1000, defaultLimit: 50, maxIn: 1000, maxDepth: 8 },
    retention: { transferDays: 30 },
    cache: {
      gcGraceMs: 60_000,
      scanCap: 100_000,
      deferIndexesFrom: 250_000,
      stagedInMemory: 10_000,
      changes: { retainRecords: 100_000, retainMs: 86_400_000 },
    },
    pipeline: { commitEveryRecords: 10_000, commitEveryMs: 1_000 },
    endpoints: [],
    logLevel: 'info',
  };

  it('runs embedded with nothing configured: SQLite and LMDB under ./.sluice, no NATS', () => {
    const config = resolveConfig({});
    expect(config).toEqual(EXPECTED_DEFAULTS);
    expect(config.nats).toBeUndefined();
    expect(config.store.startsWith('sqlite:./.sluice/')).toBe(true);
    expect(config.dataDir).toBe('./.sluice');
  });

  it('treats an empty document (null / undefined) as {}', () => {
    expect(resolveConfig(null)).toEqual(EXPECTED_DEFAULTS);
    expect(resolveConfig(undefined)).toEqual(EXPECTED_DEFAULTS);
    expect(resolveConfig(undefined, {})).toEqual(EXPECTED_DEFAULTS);
  });

  it('fills defaults inside partially given sections', () => {
    const config = resolveConfig({ node: { id: 'h1' }, transfers: { leaseMs: 9000 }, api: { port: 9000 } });
    expect(config.node).toEqual({
      id: 'h1',
      host: '127.0.0.1',
      port: 7070,
      advertisedUrl: 'http://127.0.0.1:7070',
    });
    expect(config.transfers.leaseMs).toBe(9000);
    expect(config.transfers.heartbeatMs).toBe(5000);
    expect(config.api).toEqual({
      host: '127.0.0.1',
      port: 9000,
      reconcileMs: 5000,
      freshnessWaitMs: 2000,
      changes: {
        heartbeatMs: 15_000,
        bufferBytes: 4 * 1024 * 1024,
        pollMs: 5,
        maxSubscribers: 10_000,
        maxPerClient: 100,
      },
    });
  });

  it('never returns shared default objects', () => {
    const a = resolveConfig({});
    const b = resolveConfig({});
    a.files.roots.push('/x');
    a.endpoints.push({} as never);
    expect(b.files.roots).toEqual([]);
    expect(b.endpoints).toEqual([]);
    expect(resolveConfig({}).files.roots).toEqual([]);
  });
});

describe('resolveConfig: the design’s example configuration', () => {
  const example = {
    node: { id: 'h1', port: 7070, advertisedUrl: 'http://10.0.0.5:7070' },
    store: 'postgres://user@host:5432/db',
    nats: 'nats://127.0.0.1:4222',
    dataDir: './.sluice',
    files: { roots: ['./data', './out'] },
    connections: { warehouse: { type: 'postgres', url: 'postgres://reader@db:5432/sales' } },
    api: { port: 8080 },
    endpoints: [
      {
        name: 'items',
        source: { type: 'file', path: './data/items.jsonl', format: 'jsonl' },
        primaryKey: ['id'],
        fields: { id: 'integer', value: 'number', category: 'string' },
        indexes: [['value'], ['category', 'value']],
        filter: { category: { $ne: 'hidden' } },
        select: ['id', 'value', 'category'],
      },
    ],
  };

  it('parses unchanged (as from YAML / JSON)', () => {
    const config = resolveConfig(JSON.parse(JSON.stringify(example)));
    expect(config.node).toEqual({ ...example.node, host: '127.0.0.1' });
    expect(config.store).toBe(example.store);
    expect(config.nats).toBe(example.nats);
    expect(config.files.roots).toEqual(['./data', './out']);
    expect(config.connections).toEqual(example.connections);
    expect(config.endpoints).toEqual(example.endpoints);
  });

  it('accepts the other store, NATS and endpoint forms', () => {
    expect(resolveConfig({ store: 'postgresql://u@h/db' }).store).toBe('postgresql://u@h/db');
    expect(resolveConfig({ store: 'sqlite:/var/lib/sluice.db' }).store).toBe('sqlite:/var/lib/sluice.db');
    const nats = {
      servers: ['nats://a:4222', 'nats://b:4222'],
      user: 'u',
      pass: 'p',
      tls: { caFile: '/ca.pem' },
    };
    expect(resolveConfig({ nats }).nats).toEqual({
      ...nats,
      tls: { caFile: '/ca.pem', rejectUnauthorized: true },
    });
    const config = resolveConfig({
      connections: {
        bus: { type: 'nats', nats: 'nats://bus:4222' },
        w: { type: 'postgres', url: 'postgres://reader@warehouse:5432/sales' },
      },
      endpoints: [
        {
          name: 'orders',
          source: { type: 'jetstream', stream: 'ORDERS', subject: 'orders.>', connection: 'bus', key: 'id' },
          // The key is a field of the projected record: the renamed one.
          primaryKey: ['orderId'],
          select: { orderId: 'id', total: 'amount' },
        },
        {
          name: 'pg',
          source: { type: 'postgres', connection: 'w', query: 'select 1 as id' },
          primaryKey: ['id'],
        },
      ],
    });
    expect(config.endpoints.map((e) => e.name)).toEqual(['orders', 'pg']);
    expect(config.endpoints[0]!.indexes).toEqual([]);
    expect(config.endpoints[0]!.select).toEqual({ orderId: 'id', total: 'amount' });
  });
});

describe('resolveConfig: environment overrides', () => {
  it('maps each SLUICE_* variable to its key', () => {
    const env = {
      SLUICE_NODE_ID: 'h2',
      SLUICE_PORT: '7071',
      SLUICE_ADVERTISED_URL: 'http://10.0.0.6:7071',
      SLUICE_STORE_URL: 'postgres://postgres@127.0.0.1:5432/sluice',
      SLUICE_NATS_URL: 'nats://127.0.0.1:4222',
      SLUICE_DATA_DIR: '/var/lib/sluice',
      SLUICE_FILE_ROOTS: '/data:/out',
      SLUICE_API_PORT: '8081',
      SLUICE_LOG_LEVEL: 'debug',
    };
    // Every variable the table names is set here, so each mapping is checked by its outcome below.
    expect(Object.keys(env).sort()).toEqual(Object.keys(ENV_OVERRIDES).sort());
    const config = resolveConfig({}, env);
    expect(config.node).toEqual({
      id: 'h2',
      host: '127.0.0.1',
      port: 7071,
      advertisedUrl: 'http://10.0.0.6:7071',
    });
    expect(config.store).toBe('postgres://postgres@127.0.0.1:5432/sluice');
    expect(config.nats).toBe('nats://127.0.0.1:4222');
    expect(config.dataDir).toBe('/var/lib/sluice');
    expect(config.files.roots).toEqual(['/data', '/out']);
    expect(config.api.port).toBe(8081);
    expect(config.logLevel).toBe('debug');
  });

  it('win over the file, keeping the file’s other keys', () => {
    const raw = {
      node: { id: 'from-file', host: '10.0.0.1', port: 1 },
      files: { roots: ['/a'] },
      nats: { servers: 'nats://x' },
    };
    const config = resolveConfig(raw, {
      SLUICE_PORT: '2',
      SLUICE_FILE_ROOTS: '/b',
      SLUICE_NATS_URL: 'nats://y',
    });
    expect(config.node).toEqual({
      id: 'from-file',
      host: '10.0.0.1',
      port: 2,
      advertisedUrl: 'http://10.0.0.1:2',
    });
    expect(config.files.roots).toEqual(['/b']);
    expect(config.nats).toBe('nats://y');
  });

  it('never modify the raw configuration they are applied to', () => {
    const raw = { node: { id: 'a' } };
    resolveConfig(raw, { SLUICE_NODE_ID: 'b', SLUICE_FILE_ROOTS: '/x' });
    expect(raw).toEqual({ node: { id: 'a' } });
  });

  it('ignore unset and empty variables and unrelated ones', () => {
    const config = resolveConfig(
      { node: { id: 'kept' } },
      { SLUICE_NODE_ID: '', SLUICE_PORT: undefined, SLUICE_UNKNOWN: 'x', PATH: '/bin', HOME: '/root' },
    );
    expect(config.node.id).toBe('kept');
    expect(config.node.port).toBe(7070);
  });

  it('split SLUICE_FILE_ROOTS on colons, dropping empty segments', () => {
    expect(resolveConfig({}, { SLUICE_FILE_ROOTS: '/data' }).files.roots).toEqual(['/data']);
    expect(resolveConfig({}, { SLUICE_FILE_ROOTS: '/a::/b:' }).files.roots).toEqual(['/a', '/b']);
    expect(resolveConfig({}, { SLUICE_FILE_ROOTS: ':' }).files.roots).toEqual([]);
    expect(resolveConfig({}, { SLUICE_FILE_ROOTS: './rel:../up' }).files.roots).toEqual(['./rel', '../up']);
  });

  it('turn numeric ports into numbers and report bad ones at the key’s path', () => {
    expect(resolveConfig({}, { SLUICE_PORT: '0' }).node.port).toBe(0);
    expect(resolveConfig({}, { SLUICE_PORT: '65535' }).node.port).toBe(65_535);
    expect(resolveConfig({}, { SLUICE_API_PORT: '08080' }).api.port).toBe(8080);
    for (const bad of ['abc', '70000', '-1', '1.5', '8080 ', '0x50', '1e3']) {
      expect(configPaths({}, { SLUICE_PORT: bad }), bad).toEqual(['node.port']);
      expect(configPaths({}, { SLUICE_API_PORT: bad }), bad).toEqual(['api.port']);
    }
  });

  it('report bad values at the key’s path', () => {
    expect(configPaths({}, { SLUICE_LOG_LEVEL: 'loud' })).toEqual(['logLevel']);
    expect(configPaths({}, { SLUICE_STORE_URL: 'mysql://x' })).toEqual(['store']);
    expect(configPaths({}, { SLUICE_NODE_ID: '1bad id' })).toEqual(['node.id']);
  });

  it('do not paper over a section of the wrong type', () => {
    expect(configIssues({ node: 5 }, { SLUICE_NODE_ID: 'n1' })).toEqual([
      { path: 'node', message: 'Invalid input: expected object, received number' },
    ]);
    expect(configPaths({ files: ['/a'] }, { SLUICE_FILE_ROOTS: '/b' })).toEqual(['files']);
  });

  it('create a missing or null section', () => {
    expect(resolveConfig({ node: null }, { SLUICE_NODE_ID: 'n1' }).node.id).toBe('n1');
  });
});

describe('resolveConfig: advertised URL', () => {
  it('is derived from host and port when not given', () => {
    expect(resolveConfig({ node: { host: '10.1.2.3', port: 7000 } }).node.advertisedUrl).toBe(
      'http://10.1.2.3:7000',
    );
    expect(resolveConfig({ node: { host: 'node-1.internal' } }).node.advertisedUrl).toBe(
      'http://node-1.internal:7070',
    );
  });

  it('points at loopback when listening on every interface', () => {
    expect(resolveConfig({ node: { host: '0.0.0.0' } }).node.advertisedUrl).toBe('http://127.0.0.1:7070');
    expect(resolveConfig({ node: { host: '::' } }).node.advertisedUrl).toBe('http://127.0.0.1:7070');
  });

  it('brackets IPv6 literals', () => {
    expect(resolveConfig({ node: { host: '::1' } }).node.advertisedUrl).toBe('http://[::1]:7070');
    expect(resolveConfig({ node: { host: '[fe80::1]' } }).node.advertisedUrl).toBe('http://[fe80::1]:7070');
    expect(
      () => new URL(resolveConfig({ node: { host: 'fd00::5', port: 1 } }).node.advertisedUrl!),
    ).not.toThrow();
  });

  it('is kept when given', () => {
    expect(
      resolveConfig({ node: { host: '0.0.0.0', advertisedUrl: 'http://lb:80' } }).node.advertisedUrl,
    ).toBe('http://lb:80');
  });

  it('defect: an advertised URL that is no http(s) URL was accepted, and peers then failed every call to the node', () => {
    for (const advertisedUrl of ['not a url', 'ftp://x', 'lb:80', 'http://', 'http://lb:80/?x=1'])
      expect(configPaths({ node: { advertisedUrl } }), advertisedUrl).toEqual(['node.advertisedUrl']);
    expect(configPaths({}, { SLUICE_ADVERTISED_URL: 'ftp://x' })).toEqual(['node.advertisedUrl']);
    expect(
      resolveConfig({ node: { advertisedUrl: 'https://lb.example:8443/sluice' } }).node.advertisedUrl,
    ).toBe('https://lb.example:8443/sluice');
  });
});

describe('resolveConfig: bad fields name their exact path', () => {
  it('endpoint primary keys', () => {
    expect(configPaths({ endpoints: [{ name: 'items', source: ITEMS.source }] })).toEqual([
      'endpoints[0].primaryKey',
    ]);
    expect(configPaths(withEndpoint({ primaryKey: 'id' }))).toEqual(['endpoints[0].primaryKey']);
    expect(configPaths(withEndpoint({ primaryKey: [] }))).toEqual(['endpoints[0].primaryKey']);
    expect(configPaths(withEndpoint({ primaryKey: ['a', 5] }))).toEqual(['endpoints[0].primaryKey[1]']);
    expect(configPaths(withEndpoint({ primaryKey: ['$id'] }))).toEqual(['endpoints[0].primaryKey[0]']);
    expect(configPaths(withEndpoint({ primaryKey: Array.from({ length: 9 }, (_, i) => `k${i}`) }))).toEqual([
      'endpoints[0].primaryKey',
    ]);
  });

  it('defect: an endpoint filter was held to the default query limits, not to query.maxIn / query.maxDepth', () => {
    const ids = (n: number) => Array.from({ length: n }, (_, i) => i + 1);
    const nested = (inner: Record<string, unknown>, levels: number) => {
      let filter = inner;
      for (let level = 0; level < levels; level += 1) filter = { $and: [filter] };
      return filter;
    };
    // Raised limits: a filter past the defaults (1 000 values, 8 levels) but within them is taken.
    const wide = { id: { $in: ids(2_000) } };
    const deep = nested({ value: 1 }, 12);
    const raised = resolveConfig({
      query: { maxIn: 5_000, maxDepth: 12 },
      endpoints: [
        { ...ITEMS, filter: wide },
        { ...ITEMS, name: 'deep', filter: deep },
      ],
    });
    expect(raised.endpoints.map((e) => e.filter)).toEqual([wide, deep]);
    // The pipeline parses its endpoint again with EndpointConfigSchema: it takes what the file was allowed.
    for (const endpoint of raised.endpoints)
      expect(EndpointConfigSchema.safeParse(endpoint).success, endpoint.name).toBe(true);
    // Lowered limits: a filter past them is refused at its path, naming the configured limit.
    expect(
      configIssues({
        query: { maxIn: 10, maxDepth: 2 },
        endpoints: [
          { ...ITEMS, filter: { id: { $in: ids(11) } } },
          { ...ITEMS, name: 'deep', filter: nested({ value: 1 }, 3) },
        ],
      }),
    ).toEqual([
      { path: 'endpoints[0].filter.id.$in', message: 'at most 10 values' },
      { path: 'endpoints[1].filter.$and[0].$and[0].$and', message: 'nesting deeper than 2' },
    ]);
  });

  it('fields, indexes, filter and projection', () => {
    expect(configIssues(withEndpoint({ fields: { x: 'string' } }))).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"id" is not in fields' },
    ]);
    expect(configPaths(withEndpoint({ fields: { id: 'int' } }))).toEqual(['endpoints[0].fields.id']);
    expect(
      configIssues(withEndpoint({ fields: { id: 'integer' }, indexes: [['id'], ['id', 'zz']] })),
    ).toEqual([{ path: 'endpoints[0].indexes[1][1]', message: '"zz" is not in fields' }]);
    expect(configPaths(withEndpoint({ indexes: [[]] }))).toEqual(['endpoints[0].indexes[0]']);
    expect(configPaths(withEndpoint({ indexes: ['value'] }))).toEqual(['endpoints[0].indexes[0]']);
    expect(configIssues(withEndpoint({ filter: { category: { $nope: 1 } } }))).toEqual([
      { path: 'endpoints[0].filter.category', message: 'unknown operator "$nope"' },
    ]);
    expect(configIssues(withEndpoint({ select: ['value'] }))).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"id" is not selected' },
    ]);
    expect(configPaths(withEndpoint({ select: [] }))).toEqual([
      'endpoints[0].select',
      'endpoints[0].primaryKey[0]',
    ]);
    expect(configPaths(withEndpoint({ select: { a: 5 } }))).toEqual(['endpoints[0].select.a']);
  });

  it('does not count inherited names as declared fields', () => {
    expect(configIssues(withEndpoint({ primaryKey: ['toString'], fields: { id: 'integer' } }))).toEqual([
      { path: 'endpoints[0].primaryKey[0]', message: '"toString" is not in fields' },
    ]);
    expect(configPaths(withEndpoint({ fields: { id: 'integer' }, indexes: [['hasOwnProperty']] }))).toEqual([
      'endpoints[0].indexes[0][0]',
    ]);
  });

  it('endpoint names and sources', () => {
    expect(configPaths(withEndpoint({ name: 'bad name' }))).toEqual(['endpoints[0].name']);
    expect(configPaths(withEndpoint({ source: { type: 'file', path: 'a\0' } }))).toEqual([
      'endpoints[0].source.path',
    ]);
    expect(configPaths(withEndpoint({ source: { type: 's3', bucket: 'b' } }))).toEqual([
      'endpoints[0].source.type',
    ]);
    expect(configPaths(withEndpoint({ source: { type: 'endpoint', endpoint: 'x' } }))).toEqual([
      'endpoints[0].source.type',
    ]);
    expect(configPaths(withEndpoint({ cache: 'x' }))).toEqual(['endpoints[0].cache']);
  });

  it('duplicate endpoint names', () => {
    expect(configIssues({ endpoints: [ITEMS, { ...ITEMS, name: 'other' }, ITEMS] })).toEqual([
      { path: 'endpoints[2].name', message: 'duplicate endpoint "items"' },
    ]);
    expect(configPaths({ endpoints: [ITEMS, ITEMS, ITEMS] })).toEqual([
      'endpoints[1].name',
      'endpoints[2].name',
    ]);
  });

  it('top-level and section fields', () => {
    expect(configIssues({ store: 'mysql://x' })).toEqual([
      { path: 'store', message: 'must be "sqlite:<path>" or a postgres:// URL' },
    ]);
    expect(configPaths({ store: '' })).toEqual(['store']);
    expect(configPaths({ node: { port: 70_000 } })).toEqual(['node.port']);
    expect(configPaths({ node: { port: '7070' } })).toEqual(['node.port']);
    expect(configPaths({ node: { id: '' } })).toEqual(['node.id']);
    expect(configPaths({ api: { port: -1 } })).toEqual(['api.port']);
    expect(configPaths({ api: { auth: { jwtSecret: 'short' } } })).toEqual(['api.auth.jwtSecret']);
    expect(configPaths({ api: { cors: { origins: 5 } } })).toEqual(['api.cors.origins']);
    expect(configPaths({ control: { auth: { tokens: ['short'] } } })).toEqual(['control.auth.tokens[0]']);
    expect(configPaths({ transfers: { leaseMs: 10 } })).toEqual(['transfers.leaseMs']);
    expect(configPaths({ http: { bodyBytes: 1.5 } })).toEqual(['http.bodyBytes']);
    expect(configPaths({ query: { maxDepth: 65 } })).toEqual(['query.maxDepth']);
    expect(configPaths({ retention: { transferDays: -1 } })).toEqual(['retention.transferDays']);
    expect(configPaths({ backplane: { strategy: 'carrier-pigeon' } })).toEqual(['backplane.strategy']);
    expect(configPaths({ files: { roots: [''] } })).toEqual(['files.roots[0]']);
    expect(configPaths({ files: { roots: '/a:/b' } })).toEqual(['files.roots']);
    expect(configPaths({ logLevel: 'verbose' })).toEqual(['logLevel']);
    expect(configPaths({ cache: { gcGraceMs: -1 } })).toEqual(['cache.gcGraceMs']);
    expect(configPaths({ pipeline: { commitEveryMs: 0 } })).toEqual(['pipeline.commitEveryMs']);
    expect(configPaths({ endpoints: {} })).toEqual(['endpoints']);
  });

  it('connections and NATS', () => {
    expect(configPaths({ connections: { w: { type: 'postgres' } } })).toEqual(['connections.w.url']);
    expect(configPaths({ connections: { w: { type: 'mysql', url: 'x' } } })).toEqual(['connections.w.type']);
    expect(
      configPaths({ connections: { w: { type: 'postgres', url: 'postgres://db/x', password: 'p' } } }),
    ).toEqual(['connections.w.password']);
    expect(configPaths({ connections: { '1bad': { type: 'postgres', url: 'postgres://db/x' } } })).toEqual([
      'connections.1bad',
    ]);
    expect(configIssues({ nats: 5 })).toEqual([
      { path: 'nats', message: 'Invalid input: expected string or object' },
    ]);
    expect(configPaths({ nats: { servers: [] } })).toEqual(['nats.servers']);
    expect(configPaths({ nats: { servers: 'nats://x', password: 'p' } })).toEqual(['nats.password']);
    expect(configPaths({ nats: { servers: 'nats://x', tls: { rejectUnauthorized: 'no' } } })).toEqual([
      'nats.tls.rejectUnauthorized',
    ]);
  });

  it('defect: nats with both credsFile and nkeySeed was accepted, and the NATS clients then dropped the nkey', () => {
    const both = { servers: 'nats://x', nkeySeed: 'SUAEXAMPLE', credsFile: '/etc/sluice/user.creds' };
    const message = 'set credsFile or nkeySeed, not both: a creds file carries its own nkey seed';
    expect(configIssues({ nats: both })).toEqual([{ path: 'nats.nkeySeed', message }]);
    expect(configIssues({ connections: { bus: { type: 'nats', nats: both } } })).toEqual([
      { path: 'connections.bus.nats.nkeySeed', message },
    ]);
  });

  it('unknown fields at their own path', () => {
    // A key close to a known one of its object names it (the message was `Unrecognized key: "stor"` alone).
    expect(configIssues({ stor: 'sqlite:x' })).toEqual([
      { path: 'stor', message: 'Unrecognized key: "stor"; did you mean "store"?' },
    ]);
    expect(configPaths({ api: { prot: 1 } })).toEqual(['api.prot']);
    expect(configPaths({ transfers: { leaseMS: 1000 } })).toEqual(['transfers.leaseMS']);
    expect(configPaths(withEndpoint({ primarykey: ['id'] }))).toEqual(['endpoints[0].primarykey']);
  });

  it('suggests the known key a misspelt one resembles, of its own object only', () => {
    expect(configIssues({ transfers: { leaseMS: 1000 } })).toEqual([
      { path: 'transfers.leaseMS', message: 'Unrecognized key: "leaseMS"; did you mean "leaseMs"?' },
    ]);
    expect(configIssues({ nats: { servrs: ['nats://127.0.0.1:4222'] } })).toContainEqual({
      path: 'nats.servrs',
      message: 'Unrecognized key: "servrs"; did you mean "servers"?',
    });
    // Nothing close: no guess (`ab` is two edits from `id`, too many for a two-letter key).
    expect(configIssues({ node: { colour: 'blue', ab: 1 } })).toEqual([
      { path: 'node.colour', message: 'Unrecognized key: "colour"' },
      { path: 'node.ab', message: 'Unrecognized key: "ab"' },
    ]);
  });

  it('a required key left out is said to be required, a wrong value is not', () => {
    expect(configIssues({ endpoints: [{ name: 'c', source: { type: 'file', path: '/x' } }] })).toEqual([
      { path: 'endpoints[0].primaryKey', message: 'is required (expected array)' },
    ]);
    expect(
      configIssues({ endpoints: [{ name: 'c', source: { type: 'file', path: '/x' }, primaryKey: null }] }),
    ).toEqual([{ path: 'endpoints[0].primaryKey', message: 'Invalid input: expected array, received null' }]);
  });

  it('several failures at once, in document order', () => {
    expect(
      configPaths({ store: 'x', node: { port: 'x' }, endpoints: [{ ...ITEMS, primaryKey: [] }] }),
    ).toEqual(['node.port', 'store', 'endpoints[0].primaryKey']);
  });

  it('a document that is not a mapping', () => {
    for (const raw of ['store: x', 5, true, [], [{ store: 'x' }]]) {
      expect(configIssues(raw)).toEqual([{ path: '(root)', message: expect.any(String) }]);
    }
  });
});

describe('resolveConfig: hostile input', () => {
  it('refuses __proto__ keys at every level instead of silently dropping them', () => {
    const parse = (text: string) => JSON.parse(text);
    expect(configPaths(parse('{"__proto__": {"store": "x"}}'))).toEqual(['__proto__']);
    expect(configPaths(parse('{"node": {"__proto__": {"id": "x"}}}'))).toEqual(['node.__proto__']);
    expect(configPaths(parse('{"connections": {"__proto__": {"type": "postgres", "url": "x"}}}'))).toEqual([
      'connections.__proto__',
    ]);
    const endpoint = (extra: string) =>
      parse(
        `{"endpoints": [{"name": "e", "source": {"type": "file", "path": "x"}, "primaryKey": ["id"], ${extra}}]}`,
      );
    expect(configPaths(endpoint('"fields": {"__proto__": "string", "id": "integer"}'))).toEqual([
      'endpoints[0].fields.__proto__',
    ]);
    expect(configPaths(endpoint('"select": {"__proto__": "x", "id": "id"}'))).toEqual([
      'endpoints[0].select.__proto__',
    ]);
    expect(configPaths(endpoint('"filter": {"__proto__": {"a": 1}}'))).toEqual([
      'endpoints[0].filter.__proto__',
    ]);
    expect(({} as Record<string, unknown>).store).toBeUndefined();
  });

  it('refuses reserved field names', () => {
    expect(configPaths(withEndpoint({ fields: { constructor: 'string', id: 'integer' } }))).toEqual([
      'endpoints[0].fields.constructor',
    ]);
    expect(configPaths(withEndpoint({ primaryKey: ['prototype'] }))).toEqual(['endpoints[0].primaryKey[0]']);
  });

  it('keeps a connection named like an Object.prototype member as an own entry only', () => {
    const config = resolveConfig({ connections: { constructor: { type: 'postgres', url: 'postgres://x' } } });
    expect(Object.hasOwn(config.connections, 'constructor')).toBe(true);
    expect(Object.hasOwn(resolveConfig({}).connections, 'constructor')).toBe(false);
  });

  it('refuses values that are not plain data', () => {
    expect(configIssues({ store: () => 'sqlite:x' })).toEqual([
      { path: '(root)', message: 'must be plain data (objects, arrays, strings, numbers, booleans)' },
    ]);
    expect(configPaths({ store: Symbol('x') })).toEqual(['(root)']);
  });

  it('handles huge strings, many endpoints and deep nesting with bounded errors', () => {
    expect(
      configPaths({ store: `sqlite:${'x'.repeat(1_000_000)}`, node: { id: 'x'.repeat(1_000_000) } }),
    ).toEqual(['node.id']);
    const many = Array.from({ length: 257 }, (_, i) => ({ ...ITEMS, name: `e${i}` }));
    expect(configPaths({ endpoints: many })).toEqual(['endpoints']);
    let deep: Record<string, unknown> = { a: 1 };
    for (let i = 0; i < 5000; i++) deep = { $and: [deep] };
    expect(configPaths(withEndpoint({ filter: deep }))).toHaveLength(1);
    const wide = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, i]));
    const err = thrown(() => resolveConfig(wide)) as ConfigError;
    expect(err.errors).toHaveLength(100);
    expect(err.message).toBe('Invalid configuration: k0: Unrecognized key: "k0" (and 9999 more)');
    expect(SluiceError.isInstance(err)).toBe(true);
  });
});

describe('queryLimitsOf', () => {
  it('maps the configured limits onto query limits', () => {
    expect(queryLimitsOf(resolveConfig({}))).toEqual(DEFAULT_QUERY_LIMITS);
    expect(
      queryLimitsOf(resolveConfig({ query: { maxLimit: 200, defaultLimit: 20, maxIn: 10, maxDepth: 3 } })),
    ).toEqual({
      maxLimit: 200,
      defaultLimit: 20,
      maxIn: 10,
      maxDepth: 3,
      maxSkip: DEFAULT_QUERY_LIMITS.maxSkip,
    });
  });

  it('never lets the default exceed the maximum', () => {
    expect(queryLimitsOf(resolveConfig({ query: { maxLimit: 10, defaultLimit: 50 } })).defaultLimit).toBe(10);
  });
});

describe('component schemas', () => {
  it('FieldTypeSchema lists the field types', () => {
    expect(FieldTypeSchema.options).toEqual(Object.values(FieldType));
    expect(FieldTypeSchema.options).toEqual(['string', 'integer', 'number', 'boolean', 'timestamp', 'json']);
  });

  it('ConnectionConfigSchema takes postgres URLs and NATS options', () => {
    expect(ConnectionConfigSchema.parse({ type: 'postgres', url: 'postgres://x' })).toEqual({
      type: 'postgres',
      url: 'postgres://x',
    });
    expect(ConnectionConfigSchema.parse({ type: 'nats', nats: { servers: 'nats://x', token: 't' } })).toEqual(
      {
        type: 'nats',
        nats: { servers: 'nats://x', token: 't' },
      },
    );
    expect(ConnectionConfigSchema.safeParse({ type: 'postgres', url: '' }).success).toBe(false);
    expect(ConnectionConfigSchema.safeParse({ type: 'postgres', url: 'x'.repeat(2049) }).success).toBe(false);
  });

  it('NatsConfigSchema takes a URL or a server list with credentials', () => {
    expect(NatsConfigSchema.parse('nats://a:4222')).toBe('nats://a:4222');
    expect(NatsConfigSchema.parse({ servers: ['nats://a'], nkeySeed: 'SUxxx' })).toEqual({
      servers: ['nats://a'],
      nkeySeed: 'SUxxx',
    });
    expect(NatsConfigSchema.parse({ servers: ['nats://a'], credsFile: '/c', token: 't' })).toEqual({
      servers: ['nats://a'],
      credsFile: '/c',
      token: 't',
    });
    // Both would be two identities: refused (see the defect above).
    expect(
      NatsConfigSchema.safeParse({ servers: ['nats://a'], nkeySeed: 'SUxxx', credsFile: '/c' }).success,
    ).toBe(false);
    expect(NatsConfigSchema.safeParse('').success).toBe(false);
  });

  it('ControlAuthSchema needs long tokens and secrets', () => {
    expect(ControlAuthSchema.parse({ tokens: ['t'.repeat(16)] })).toEqual({ tokens: ['t'.repeat(16)] });
    expect(ControlAuthSchema.safeParse({ tokens: ['t'.repeat(15)] }).success).toBe(false);
    expect(ControlAuthSchema.safeParse({ jwtSecret: 's'.repeat(15) }).success).toBe(false);
  });

  it('an endpoint switch: mode defaults to auto, gates are optional and bounded', () => {
    expect(EndpointConfigSchema.parse({ ...ITEMS, switch: {} }).switch).toEqual({ mode: 'auto' });
    expect(
      EndpointConfigSchema.parse({
        ...ITEMS,
        switch: { mode: 'manual', minRecordRatio: 0.9, maxBadRecords: 0 },
      }).switch,
    ).toEqual({ mode: 'manual', minRecordRatio: 0.9, maxBadRecords: 0 });
    // The hand-over wait: absent means SWITCH_DEFAULTS (10 s), applied where it is used.
    expect(EndpointConfigSchema.parse({ ...ITEMS, switch: { handoverWaitMs: 30_000 } }).switch).toEqual({
      mode: 'auto',
      handoverWaitMs: 30_000,
    });
    expect(SWITCH_DEFAULTS.handoverWaitMs).toBe(10_000);
    // Refused at start with the exact key and its bound.
    const refused = thrown(() =>
      resolveConfig(withEndpoint({ switch: { handoverWaitMs: 50 } })),
    ) as ConfigError;
    expect(refused.code).toBe('CONFIG_INVALID');
    expect(refused.message).toBe(
      'Invalid configuration: endpoints[0].switch.handoverWaitMs: Too small: expected number to be >=100',
    );
    for (const [bad, path] of [
      [{ mode: 'sometimes' }, 'switch.mode'],
      [{ minRecordRatio: -0.1 }, 'switch.minRecordRatio'],
      [{ maxBadRecords: 1.5 }, 'switch.maxBadRecords'],
      [{ handoverWaitMs: 99 }, 'switch.handoverWaitMs'],
      [{ handoverWaitMs: 300_001 }, 'switch.handoverWaitMs'],
      [{ handoverWaitMs: 1_500.5 }, 'switch.handoverWaitMs'],
      [{ handoverWaitMs: '10s' }, 'switch.handoverWaitMs'],
      [{ gate: true }, 'switch'],
    ] as const) {
      const parsed = EndpointConfigSchema.safeParse({ ...ITEMS, switch: bad });
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues.map((i) => i.path.join('.'))).toEqual([path]);
    }
  });

  it('the section schemas fill the same defaults as the whole configuration', () => {
    const defaults = resolveConfig({});
    expect(TransfersConfigSchema.parse(undefined)).toEqual(defaults.transfers);
    expect(HttpConfigSchema.parse(undefined)).toEqual(defaults.http);
    expect(QueryConfigSchema.parse(undefined)).toEqual(defaults.query);
    expect(RetentionConfigSchema.parse(undefined)).toEqual(defaults.retention);
  });

  it('EndpointConfigSchema and SluiceConfigSchema are usable directly', () => {
    expect(EndpointConfigSchema.parse(ITEMS)).toEqual({
      ...ITEMS,
      source: { ...ITEMS.source, format: 'jsonl' },
      indexes: [],
    });
    const direct = SluiceConfigSchema.parse({});
    expect(direct.node.advertisedUrl).toBeUndefined(); // only resolveConfig derives it
    expect(direct.store).toBe('sqlite:./.sluice/store.db');
  });
});

describe('resolveConfig: replication slots of a host', () => {
  const table = (name: string, source: Record<string, unknown> = {}) => ({
    name,
    source: { type: 'postgres', connection: 'w', table: 'items', ...source },
    primaryKey: ['id'],
  });
  const host = (...endpoints: unknown[]) => ({
    node: { id: 'h1' },
    connections: { w: { type: 'postgres', url: 'postgres://reader@warehouse:5432/sales' } },
    endpoints,
  });

  it('defect: endpoints whose names differ only in case, "-" or "." were accepted though they read one replication slot (and took it from each other)', () => {
    for (const other of ['my_items', 'My-Items', 'my.items']) {
      const issues = configIssues(host(table('my-items'), table(other)));
      expect(issues).toEqual([
        {
          path: 'endpoints[1].name',
          message: expect.stringContaining(
            'reads replication slot sluice_h1_my_items_source, as endpoint "my-items" does',
          ),
        },
      ]);
    }
    // A configured slot another endpoint's derived name takes, or two endpoints naming one slot.
    expect(configPaths(host(table('a'), table('b', { slot: 'sluice_h1_a_source_b' })))).toEqual([
      'endpoints[1].source.slot',
    ]);
    expect(configPaths(host(table('a', { slot: 's1' }), table('b', { slot: 's1' })))).toEqual([
      'endpoints[1].source.slot',
    ]);
  });

  it('accepts look-alike names that read no slot, and look-alikes with slots of their own', () => {
    expect(
      resolveConfig(host(table('my-items', { capture: 'poll', cursor: 'id' }), table('my_items'))).endpoints,
    ).toHaveLength(2);
    expect(
      resolveConfig(host(table('my-items', { slot: 'items_a', publication: 'items_a' }), table('my_items')))
        .endpoints,
    ).toHaveLength(2);
    expect(resolveConfig(host(table('items'), table('orders'))).endpoints).toHaveLength(2);
  });
});
