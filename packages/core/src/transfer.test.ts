import { describe, expect, it } from 'vitest';
import { thrown } from '../test/helpers.js';
import {
  IdempotencyKeyMismatchError,
  type SluiceError,
  UnsupportedAddressTypeError,
  ValidationError,
} from './errors.js';
import { requestHash } from './request-fingerprint.js';
import {
  BadRecordPolicy,
  PropertiesSchema,
  parseTransferRequest,
  TransferFailureSchema,
  TransferIdSchema,
  TransferMode,
  TransferOptionsSchema,
  TransferRequestSchema,
  TransferResultSchema,
} from './transfer.js';

const SOURCE = { type: 'file', path: '/data/orders.jsonl', format: 'jsonl' };
const DESTINATION = { type: 'file', path: '/out/orders.jsonl', format: 'jsonl' };
const MINIMAL = { id: 'orders-2026-12-01', source: SOURCE, destination: DESTINATION };

/** The failing paths of a request that must be refused as VALIDATION_FAILED. */
function invalidPaths(body: unknown, idempotencyKey?: string): string[] {
  const err = thrown(() => parseTransferRequest(body, idempotencyKey));
  expect(err).toBeInstanceOf(ValidationError);
  expect((err as ValidationError).code).toBe('VALIDATION_FAILED');
  expect((err as ValidationError).status).toBe(400);
  return [...new Set((err as ValidationError).errors.map((e) => e.path))];
}

describe('TransferIdSchema', () => {
  it('accepts 1 to 200 characters of [A-Za-z0-9._:-]', () => {
    for (const id of ['a', '0', 'orders-2026-12-01', 'ns:job.v2_final-3', 'x'.repeat(200), '...', '-:-']) {
      expect(TransferIdSchema.parse(id)).toBe(id);
    }
  });

  it('refuses everything else', () => {
    for (const id of [
      '',
      'x'.repeat(201),
      'a b',
      'a/b',
      '../etc',
      'a\0',
      'a\n',
      '\na',
      'ä',
      'a#b',
      'a?b',
      'a%20',
      5,
      null,
      undefined,
      ['a'],
      { id: 'a' },
    ]) {
      expect(TransferIdSchema.safeParse(id).success, JSON.stringify(id)).toBe(false);
    }
    expect(TransferIdSchema.safeParse('').error?.issues[0]?.message).toBe('must be 1 to 200 characters');
  });

  it('defect: "." and ".." were accepted though no URL can name them (clients resolve them as dot-segments)', () => {
    for (const id of ['.', '..']) {
      const result = TransferIdSchema.safeParse(id);
      expect(result.success, id).toBe(false);
      expect(result.error?.issues[0]?.message).toBe('must not be "." or ".." (a URL path cannot name them)');
    }
    // Other runs of dots are plain path segments.
    expect(TransferIdSchema.parse('...')).toBe('...');
    expect(TransferIdSchema.parse('.a')).toBe('.a');
  });
});

describe('parseTransferRequest: valid requests', () => {
  it('parses the minimal request and fills defaults', () => {
    expect(parseTransferRequest(MINIMAL)).toEqual({
      id: 'orders-2026-12-01',
      mode: 'idempotent',
      source: SOURCE,
      destination: DESTINATION,
      properties: {},
      options: { onBadRecord: 'skip' },
    });
  });

  it('parses the full example from the design', () => {
    const body = {
      id: 'orders-2026-12-01',
      mode: 'idempotent',
      source: SOURCE,
      destination: DESTINATION,
      properties: { requestedBy: 'billing' },
      options: { maxRecordsPerSecond: 500 },
    };
    expect(parseTransferRequest(JSON.parse(JSON.stringify(body)))).toEqual({
      ...body,
      options: { maxRecordsPerSecond: 500, onBadRecord: 'skip' },
    });
  });

  it('accepts every address type in its role', () => {
    const pg = { type: 'postgres', connection: 'warehouse', table: 'public.orders', key: 'id' };
    const js = { type: 'jetstream', stream: 'ORDERS', subject: 'orders.new', key: ['region', 'id'] };
    const ep = { type: 'endpoint', endpoint: 'items' };
    expect(parseTransferRequest({ ...MINIMAL, source: pg, destination: js }).source).toEqual(pg);
    expect(parseTransferRequest({ ...MINIMAL, source: js, destination: pg }).destination).toEqual(pg);
    expect(parseTransferRequest({ ...MINIMAL, destination: ep }).destination).toEqual(ep);
    expect(
      parseTransferRequest({ ...MINIMAL, source: { type: 'file', path: '/a.csv', format: 'csv' } }).source,
    ).toEqual({ type: 'file', path: '/a.csv', format: 'csv' });
  });

  it('accepts fire-and-forget, options and up to 64 scalar properties', () => {
    const properties: Record<string, string | number | boolean | null> = Object.fromEntries(
      Array.from({ length: 64 }, (_, i) => [`k${i}`, i % 2 ? 'v' : i]),
    );
    properties.k0 = null;
    properties.k2 = true;
    const request = parseTransferRequest({
      ...MINIMAL,
      mode: 'fire-and-forget',
      properties,
      options: { maxRecordsPerSecond: 10_000_000, onBadRecord: 'fail', batchSize: 100_000 },
    });
    expect(request.mode).toBe(TransferMode.fireAndForget);
    expect(request.properties).toEqual(properties);
    expect(request.options).toEqual({
      maxRecordsPerSecond: 10_000_000,
      onBadRecord: 'fail',
      batchSize: 100_000,
    });
  });

  it('does not modify the body it is given', () => {
    const body = JSON.parse(JSON.stringify({ source: SOURCE, destination: DESTINATION }));
    const before = JSON.stringify(body);
    parseTransferRequest(body, 'from-header');
    expect(JSON.stringify(body)).toBe(before);
    expect(body.id).toBeUndefined();
  });

  it('never shares default objects between requests', () => {
    const a = parseTransferRequest({ ...MINIMAL, id: 'a' });
    const b = parseTransferRequest({ ...MINIMAL, id: 'b' });
    expect(a.properties).not.toBe(b.properties);
    expect(a.options).not.toBe(b.options);
  });
});

describe('parseTransferRequest: the Idempotency-Key header', () => {
  it('supplies the id when the body has none', () => {
    expect(parseTransferRequest({ source: SOURCE, destination: DESTINATION }, 'key-1').id).toBe('key-1');
  });

  it('agrees with an equal body id', () => {
    expect(parseTransferRequest({ ...MINIMAL, id: 'key-1' }, 'key-1').id).toBe('key-1');
  });

  it('is refused with IDEMPOTENCY_KEY_MISMATCH (400) when it differs from the body id', () => {
    const err = thrown(() => parseTransferRequest({ ...MINIMAL, id: 'body-id' }, 'header-id'));
    expect(err).toBeInstanceOf(IdempotencyKeyMismatchError);
    expect((err as SluiceError).code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect((err as SluiceError).status).toBe(400);
    expect((err as SluiceError).message).toBe(
      'The Idempotency-Key header "header-id" differs from the body id "body-id"',
    );
  });

  it('is validated like a body id', () => {
    expect(invalidPaths({ source: SOURCE, destination: DESTINATION }, 'has space')).toEqual(['id']);
    expect(invalidPaths({ source: SOURCE, destination: DESTINATION }, '')).toEqual(['id']);
    expect(invalidPaths({ source: SOURCE, destination: DESTINATION }, 'x'.repeat(201))).toEqual(['id']);
  });

  it('leaves a body id of the wrong type to validation', () => {
    expect(invalidPaths({ ...MINIMAL, id: 5 }, '5')).toEqual(['id']);
    expect(invalidPaths({ ...MINIMAL, id: null }, 'k')).toEqual(['id']);
  });

  it('requires an id from somewhere', () => {
    expect(invalidPaths({ source: SOURCE, destination: DESTINATION })).toEqual(['id']);
  });

  it('keeps a mismatch message short even for a huge body id', () => {
    const err = thrown(() =>
      parseTransferRequest({ ...MINIMAL, id: 'x'.repeat(1_000_000) }, 'k'),
    ) as SluiceError;
    expect(err.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect(err.message.length).toBeLessThan(600);
  });
});

describe('parseTransferRequest: unknown address types', () => {
  it.each([
    ['source', { ...MINIMAL, source: { type: 's3', bucket: 'b' } }],
    ['source', { ...MINIMAL, source: { type: 'endpoint', endpoint: 'items' } }],
    ['destination', { ...MINIMAL, destination: { type: 'http', url: 'http://x' } }],
    ['destination', { ...MINIMAL, destination: { type: '__proto__' } }],
    ['destination', { ...MINIMAL, destination: { type: 'constructor' } }],
  ] as const)('%s %j → UNSUPPORTED_ADDRESS_TYPE 422', (role, body) => {
    const err = thrown(() => parseTransferRequest(body));
    expect(err).toBeInstanceOf(UnsupportedAddressTypeError);
    expect((err as SluiceError).code).toBe('UNSUPPORTED_ADDRESS_TYPE');
    expect((err as SluiceError).status).toBe(422);
    expect((err as SluiceError).details?.role).toBe(role);
  });

  it('reports a missing or non-string type as a validation failure at its path', () => {
    expect(invalidPaths({ ...MINIMAL, source: { path: '/a' } })).toEqual(['source.type']);
    expect(invalidPaths({ ...MINIMAL, destination: { type: 7, path: '/a' } })).toEqual(['destination.type']);
    expect(invalidPaths({ ...MINIMAL, source: 'file:///a' })).toEqual(['source']);
    expect(invalidPaths({ ...MINIMAL, destination: null })).toEqual(['destination']);
  });
});

describe('parseTransferRequest: invalid and hostile bodies', () => {
  it('refuses a body that is not an object', () => {
    for (const body of [null, undefined, 'x', 5, true, [], [MINIMAL]]) {
      expect(invalidPaths(body)).toEqual(['(root)']);
    }
  });

  it('names the path of each bad field', () => {
    expect(invalidPaths({ ...MINIMAL, mode: 'sometimes' })).toEqual(['mode']);
    expect(invalidPaths({ ...MINIMAL, source: { ...SOURCE, path: '/a\0b' } })).toEqual(['source.path']);
    expect(invalidPaths({ ...MINIMAL, destination: { ...DESTINATION, format: 'xml' } })).toEqual([
      'destination.format',
    ]);
    expect(
      invalidPaths({ ...MINIMAL, source: { type: 'postgres', connection: 'w', table: 't; drop table t' } }),
    ).toEqual(['source.table']);
    expect(invalidPaths({ ...MINIMAL, options: { batchSize: 0 } })).toEqual(['options.batchSize']);
    expect(invalidPaths({ ...MINIMAL, options: { batchSize: 100_001 } })).toEqual(['options.batchSize']);
    expect(invalidPaths({ ...MINIMAL, options: { maxRecordsPerSecond: 1.5 } })).toEqual([
      'options.maxRecordsPerSecond',
    ]);
    expect(invalidPaths({ ...MINIMAL, options: { maxRecordsPerSecond: -1 } })).toEqual([
      'options.maxRecordsPerSecond',
    ]);
    expect(invalidPaths({ ...MINIMAL, options: { onBadRecord: 'ignore' } })).toEqual(['options.onBadRecord']);
    expect(invalidPaths({ ...MINIMAL, options: 'fast' })).toEqual(['options']);
    expect(invalidPaths({ ...MINIMAL, properties: ['a'] })).toEqual(['properties']);
  });

  it('options.follow only for a source that can follow: a replication PostgreSQL table or a following file', () => {
    const pg = { type: 'postgres', connection: 'w', table: 'orders' };
    const replication = { ...pg, capture: 'replication' };
    const follow = { follow: true };
    expect(invalidPaths({ ...MINIMAL, options: follow })).toEqual(['options.follow']);
    expect(invalidPaths({ ...MINIMAL, source: pg, options: follow })).toEqual(['options.follow']);
    expect(invalidPaths({ ...MINIMAL, source: { ...pg, capture: 'poll' }, options: follow })).toEqual([
      'options.follow',
    ]);
    expect(
      invalidPaths({
        ...MINIMAL,
        source: { type: 'jetstream', stream: 'S', subject: 's.>' },
        options: follow,
      }),
    ).toEqual(['options.follow']);
    const message = (
      thrown(() => parseTransferRequest({ ...MINIMAL, options: follow })) as ValidationError
    ).errors.find((e) => e.path === 'options.follow')?.message;
    expect(message).toMatch(/capture "replication".*follow: true/);
    const into = { type: 'postgres', connection: 'w', table: 'orders_copy' };
    expect(
      parseTransferRequest({ ...MINIMAL, source: replication, destination: into, options: follow }).options
        .follow,
    ).toBe(true);
    expect(
      parseTransferRequest({
        ...MINIMAL,
        source: { ...SOURCE, follow: true },
        destination: into,
        options: follow,
      }).options.follow,
    ).toBe(true);
    // follow: false asks for nothing and is allowed everywhere.
    expect(parseTransferRequest({ ...MINIMAL, options: { follow: false } }).options.follow).toBe(false);
  });

  it('defect: a following transfer into a file was accepted, though a file is published only when a transfer ends and a following one never does', () => {
    const replication = { type: 'postgres', connection: 'w', table: 'orders', capture: 'replication' };
    const follow = { follow: true };
    for (const source of [replication, { ...SOURCE, follow: true }]) {
      expect(invalidPaths({ ...MINIMAL, source, options: follow })).toEqual(['options.follow']);
      const message = (
        thrown(() => parseTransferRequest({ ...MINIMAL, source, options: follow })) as ValidationError
      ).errors.find((e) => e.path === 'options.follow')?.message;
      expect(message).toMatch(
        /postgres, jetstream or endpoint.*file destination is published only when the transfer ends/,
      );
    }
    const stream = { type: 'jetstream', stream: 'ORDERS', subject: 'orders.copy' };
    expect(
      parseTransferRequest({ ...MINIMAL, source: replication, destination: stream, options: follow }).options
        .follow,
    ).toBe(true);
    expect(
      parseTransferRequest({
        ...MINIMAL,
        source: replication,
        destination: { type: 'endpoint', endpoint: 'orders' },
        options: follow,
      }).options.follow,
    ).toBe(true);
    // Without follow a file destination is fine: the transfer ends and publishes it.
    expect(parseTransferRequest({ ...MINIMAL, source: replication }).destination.type).toBe('file');
  });

  it('reports several failures at once', () => {
    expect(invalidPaths({ id: '', mode: 1, source: { type: 'file' }, destination: DESTINATION })).toEqual([
      'id',
      'mode',
      'source.path',
    ]);
  });

  it('refuses unknown fields at their own path', () => {
    expect(invalidPaths({ ...MINIMAL, priority: 1 })).toEqual(['priority']);
    expect(invalidPaths({ ...MINIMAL, options: { retries: 3 } })).toEqual(['options.retries']);
    expect(invalidPaths({ ...MINIMAL, source: { ...SOURCE, credentials: 'x' } })).toEqual([
      'source.credentials',
    ]);
  });

  it('refuses prototype-pollution keys at every level, including via JSON.parse', () => {
    const json = (text: string) => JSON.parse(text);
    const base = JSON.stringify(MINIMAL).slice(0, -1);
    expect(invalidPaths(json(`${base},"__proto__":{"mode":"fire-and-forget"}}`))).toEqual(['__proto__']);
    expect(invalidPaths(json(`${base},"constructor":{"prototype":{"x":1}}}`))).toEqual(['constructor']);
    expect(invalidPaths(json(`${base},"properties":{"__proto__":"x"}}`))).toEqual(['properties.__proto__']);
    expect(invalidPaths(json(`${base},"properties":{"constructor":"x"}}`))).toEqual([
      'properties.constructor',
    ]);
    expect(invalidPaths(json(`${base},"properties":{"prototype":1}}`))).toEqual(['properties.prototype']);
    expect(
      invalidPaths(
        json(
          `{"id":"a","source":{"type":"file","path":"/a","__proto__":{}},"destination":{"type":"file","path":"/b"}}`,
        ),
      ),
    ).toEqual(['source.__proto__']);
    expect(invalidPaths(json(`${base},"options":{"__proto__":{"onBadRecord":"fail"}}}`))).toEqual([
      'options.__proto__',
    ]);
    // Nothing leaked onto the global prototype.
    expect(({} as Record<string, unknown>).mode).toBeUndefined();
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('refuses non-scalar and over-long property values, and bad property keys', () => {
    expect(invalidPaths({ ...MINIMAL, properties: { a: { b: 1 } } })).toEqual(['properties.a']);
    expect(invalidPaths({ ...MINIMAL, properties: { a: [1] } })).toEqual(['properties.a']);
    expect(invalidPaths({ ...MINIMAL, properties: { a: Number.POSITIVE_INFINITY } })).toEqual([
      'properties.a',
    ]);
    expect(invalidPaths({ ...MINIMAL, properties: { a: 'x'.repeat(65_537) } })).toEqual(['properties.a']);
    expect(invalidPaths({ ...MINIMAL, properties: { '': 1 } })).toEqual(['properties[""]']);
    const longKey = 'k'.repeat(257);
    expect(invalidPaths({ ...MINIMAL, properties: { [longKey]: 1 } })).toHaveLength(1);
  });

  it('refuses more than 64 properties', () => {
    const properties = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, i]));
    const err = thrown(() => parseTransferRequest({ ...MINIMAL, properties })) as ValidationError;
    expect(err.errors).toEqual([{ path: 'properties', message: 'at most 64 properties' }]);
  });

  it('survives huge and deeply nested input with a bounded error', () => {
    const deep: Record<string, unknown> = {};
    let cursor = deep;
    for (let i = 0; i < 2_000; i++) {
      cursor.a = {};
      cursor = cursor.a as Record<string, unknown>;
    }
    expect(invalidPaths({ ...MINIMAL, properties: deep })).toEqual(['properties.a']);
    expect(invalidPaths({ ...MINIMAL, source: deep })).toEqual(['source.type']);

    const wide = Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`f${i}`, i]));
    const err = thrown(() => parseTransferRequest({ ...MINIMAL, ...wide })) as ValidationError;
    expect(err.errors).toHaveLength(100);
    expect(err.message.length).toBeLessThan(300);

    expect(invalidPaths({ ...MINIMAL, source: { ...SOURCE, path: '/'.repeat(1_000_000) } })).toEqual([
      'source.path',
    ]);
  });
});

describe('requestHash', () => {
  const full = {
    id: 'h-1',
    mode: 'idempotent',
    source: { type: 'postgres', connection: 'w', table: 'orders', key: ['region', 'id'] },
    destination: { type: 'jetstream', stream: 'S', subject: 'orders.out' },
    properties: { a: 1, b: 'two', c: null },
    options: { maxRecordsPerSecond: 5, onBadRecord: 'fail' },
  };

  /** The same object with every key order reversed, recursively. */
  function reversed(value: unknown): unknown {
    if (Array.isArray(value)) return value.map(reversed);
    if (value === null || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value)
        .reverse()
        .map(([k, v]) => [k, reversed(v)]),
    );
  }

  it('is a hex SHA-256 that does not depend on key order', () => {
    const a = requestHash(parseTransferRequest(full));
    const b = requestHash(parseTransferRequest(reversed(full)));
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(reversed(full))).not.toBe(JSON.stringify(full));
    expect(b).toBe(a);
  });

  it('survives a JSON round trip of the parsed request', () => {
    const request = parseTransferRequest(full);
    expect(requestHash(TransferRequestSchema.parse(JSON.parse(JSON.stringify(request))))).toBe(
      requestHash(request),
    );
  });

  it('treats explicit defaults as equal to omitted ones', () => {
    const omitted = requestHash(parseTransferRequest({ id: 'x', source: SOURCE, destination: DESTINATION }));
    const explicit = requestHash(
      parseTransferRequest({
        id: 'x',
        mode: 'idempotent',
        source: { ...SOURCE, format: 'jsonl' },
        destination: DESTINATION,
        properties: {},
        options: { onBadRecord: 'skip' },
      }),
    );
    expect(explicit).toBe(omitted);
  });

  it('treats the header id like the body id', () => {
    expect(requestHash(parseTransferRequest({ source: SOURCE, destination: DESTINATION }, 'k'))).toBe(
      requestHash(parseTransferRequest({ id: 'k', source: SOURCE, destination: DESTINATION })),
    );
  });

  it('changes when anything meaningful changes', () => {
    const base = requestHash(parseTransferRequest(full));
    const variants = [
      { ...full, id: 'h-2' },
      { ...full, mode: 'fire-and-forget' },
      { ...full, source: { ...full.source, key: ['id', 'region'] } },
      { ...full, source: { ...full.source, table: 'orders2' } },
      { ...full, destination: { ...full.destination, subject: 'orders.other' } },
      { ...full, properties: { ...full.properties, a: '1' } },
      { ...full, properties: { ...full.properties, d: false } },
      { ...full, options: { ...full.options, onBadRecord: 'skip' } },
    ];
    const hashes = variants.map((v) => requestHash(parseTransferRequest(v)));
    for (const h of hashes) expect(h).not.toBe(base);
    expect(new Set(hashes).size).toBe(variants.length);
  });
});

describe('other transfer schemas', () => {
  it('TransferOptionsSchema defaults onBadRecord to skip', () => {
    expect(TransferOptionsSchema.parse({})).toEqual({ onBadRecord: 'skip' });
    expect(Object.values(BadRecordPolicy)).toEqual(['skip', 'fail']);
    expect(Object.values(TransferMode)).toEqual(['idempotent', 'fire-and-forget']);
  });

  it('PropertiesSchema takes scalars under safe keys', () => {
    expect(PropertiesSchema.parse({ a: 1, b: null })).toEqual({ a: 1, b: null });
    expect(PropertiesSchema.safeParse({ constructor: 1 }).success).toBe(false);
  });

  it('TransferResultSchema counts non-negative integers and defaults badRecords', () => {
    expect(TransferResultSchema.parse({ recordsRead: 3, recordsWritten: 2 })).toEqual({
      recordsRead: 3,
      recordsWritten: 2,
      badRecords: 0,
    });
    expect(
      TransferResultSchema.parse({ recordsRead: 0, recordsWritten: 0, durationMs: 1.5 }).durationMs,
    ).toBe(1.5);
    for (const bad of [
      { recordsRead: -1, recordsWritten: 0 },
      { recordsRead: 1.5, recordsWritten: 0 },
      { recordsRead: 1 },
      { recordsRead: '1', recordsWritten: 0 },
      { recordsRead: 1, recordsWritten: 1, durationMs: -1 },
    ]) {
      expect(TransferResultSchema.safeParse(bad).success).toBe(false);
    }
  });

  it('TransferFailureSchema needs a code and a message', () => {
    expect(TransferFailureSchema.parse({ code: 'SOURCE_FAILED', message: 'x' })).toEqual({
      code: 'SOURCE_FAILED',
      message: 'x',
    });
    expect(TransferFailureSchema.safeParse({ code: 'X' }).success).toBe(false);
    expect(TransferFailureSchema.safeParse({ code: 1, message: 'x' }).success).toBe(false);
  });
});
