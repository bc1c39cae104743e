import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  assertKnownAddressType,
  DESTINATION_TYPES,
  DestinationAddressSchema,
  EndpointAddressSchema,
  FileAddressSchema,
  FileFormat,
  JetStreamAddressSchema,
  keyFields,
  NameSchema,
  PostgresAddressSchema,
  postgresCapture,
  SOURCE_TYPES,
  SourceAddressSchema,
  SqlIdentifierSchema,
} from './addresses.js';
import { SluiceError, UnsupportedAddressTypeError, ValidationError } from './errors.js';
import { parseOrThrow } from './validation.js';

/** The distinct failing paths of parsing `input` with `schema` (as FieldIssue paths). */
function pathsOf(schema: z.ZodType, input: unknown): string[] {
  try {
    parseOrThrow(schema, input);
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return [...new Set((err as ValidationError).errors.map((e) => e.path))];
  }
  throw new Error('expected the parse to fail');
}

describe('NameSchema', () => {
  it('accepts configuration names', () => {
    for (const name of ['a', 'warehouse', 'orders_2026', 'items.v2', 'A-b_c.d', 'x'.repeat(128)]) {
      expect(NameSchema.parse(name)).toBe(name);
    }
  });

  it('refuses anything else', () => {
    for (const bad of [
      '',
      '1abc',
      '_x',
      '-x',
      '.x',
      'a b',
      'a/b',
      'a\0b',
      'a\n',
      'ä',
      '__proto__',
      'x'.repeat(129),
      5,
      null,
      ['a'],
    ]) {
      expect(NameSchema.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });
});

describe('SqlIdentifierSchema', () => {
  it('accepts plain and schema-qualified identifiers', () => {
    for (const id of ['orders', '_t', 'public.orders', 'S1.T_2', 'a'.repeat(127)]) {
      expect(SqlIdentifierSchema.parse(id)).toBe(id);
    }
  });

  it('refuses injection attempts and oddities', () => {
    for (const bad of [
      '',
      'orders; drop table x',
      'a.b.c',
      '"quoted"',
      '1abc',
      'a-b',
      'a b',
      'a.',
      '.a',
      'a'.repeat(128),
      'a\0',
    ]) {
      expect(SqlIdentifierSchema.safeParse(bad).success, bad).toBe(false);
    }
  });
});

describe('FileAddressSchema', () => {
  it('defaults the format to jsonl', () => {
    expect(FileAddressSchema.parse({ type: 'file', path: '/data/in.jsonl' })).toEqual({
      type: 'file',
      path: '/data/in.jsonl',
      format: 'jsonl',
    });
    expect(FileAddressSchema.parse({ type: 'file', path: 'x.csv', format: 'csv', follow: true })).toEqual({
      type: 'file',
      path: 'x.csv',
      format: 'csv',
      follow: true,
    });
    expect(Object.values(FileFormat)).toEqual(['jsonl', 'csv']);
  });

  it('refuses NUL bytes, empty and huge paths, bad formats and unknown fields', () => {
    expect(pathsOf(FileAddressSchema, { type: 'file', path: '/data/a\0.jsonl' })).toEqual(['path']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: '' })).toEqual(['path']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: `/${'a'.repeat(4096)}` })).toEqual(['path']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: 5 })).toEqual(['path']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: '/a', format: 'parquet' })).toEqual(['format']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: '/a', follow: 'yes' })).toEqual(['follow']);
    expect(pathsOf(FileAddressSchema, { type: 'file', path: '/a', url: 'http://x' })).toEqual(['url']);
    expect(pathsOf(FileAddressSchema, { type: 'files', path: '/a' })).toEqual(['type']);
    expect(pathsOf(FileAddressSchema, {})).toEqual(['type', 'path']);
  });

  it('accepts a path of exactly 4096 characters', () => {
    expect(FileAddressSchema.safeParse({ type: 'file', path: 'a'.repeat(4096) }).success).toBe(true);
  });
});

describe('PostgresAddressSchema', () => {
  it('accepts a table or a query on a named connection', () => {
    expect(
      PostgresAddressSchema.parse({
        type: 'postgres',
        connection: 'warehouse',
        table: 'public.orders',
        key: 'id',
      }),
    ).toEqual({ type: 'postgres', connection: 'warehouse', table: 'public.orders', key: 'id' });
    expect(
      PostgresAddressSchema.parse({
        type: 'postgres',
        connection: 'w',
        query: 'select * from orders where region = $1',
        key: ['region', 'id'],
        cursor: 'updated_at',
      }).query,
    ).toBe('select * from orders where region = $1');
  });

  it('requires exactly one of table or query', () => {
    expect(pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w' })).toEqual(['table']);
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', table: 't', query: 'select 1' }),
    ).toEqual(['table']);
  });

  it('never takes a URL or credentials, only a connection name', () => {
    expect(
      pathsOf(PostgresAddressSchema, {
        type: 'postgres',
        connection: 'w',
        table: 't',
        url: 'postgres://evil@attacker:5432/x',
      }),
    ).toEqual(['url']);
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'postgres://evil@x/y', table: 't' }),
    ).toEqual(['connection']);
  });

  it('refuses bad tables, keys, cursors and huge queries', () => {
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', table: 'orders; drop table x' }),
    ).toEqual(['table']);
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', query: 'x'.repeat(16_385) }),
    ).toEqual(['query']);
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', table: 't', key: [] }),
    ).toEqual(['key']);
    expect(
      pathsOf(PostgresAddressSchema, {
        type: 'postgres',
        connection: 'w',
        table: 't',
        key: Array.from({ length: 17 }, (_, i) => `k${i}`),
      }),
    ).toEqual(['key']);
    expect(pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', table: 't', key: 5 })).toEqual(
      ['key'],
    );
    expect(
      pathsOf(PostgresAddressSchema, { type: 'postgres', connection: 'w', table: 't', cursor: '' }),
    ).toEqual(['cursor']);
    expect(pathsOf(PostgresAddressSchema, { type: 'postgres', table: 't' })).toEqual(['connection']);
  });
});

describe('PostgreSQL capture (issue 16)', () => {
  const table = { type: 'postgres', connection: 'w', table: 'public.orders' } as const;
  it('a table without a cursor replicates in an endpoint; a cursor, a query and transfers poll unless told', () => {
    const parse = (a: object) => PostgresAddressSchema.parse(a);
    expect(postgresCapture(parse(table), 'endpoint')).toBe('replication');
    expect(postgresCapture(parse({ ...table, cursor: 'updated_at' }), 'endpoint')).toBe('poll');
    expect(
      postgresCapture(parse({ ...table, cursor: 'updated_at', capture: 'replication' }), 'endpoint'),
    ).toBe('replication');
    expect(postgresCapture(parse({ ...table, capture: 'poll' }), 'endpoint')).toBe('poll');
    expect(
      postgresCapture(parse({ type: 'postgres', connection: 'w', query: 'select 1', key: 'id' }), 'endpoint'),
    ).toBe('poll');
    expect(postgresCapture(parse(table), 'transfer')).toBe('poll');
    expect(postgresCapture(parse({ ...table, capture: 'replication' }), 'transfer')).toBe('replication');
  });

  it('takes slot and publication names PostgreSQL accepts, only with replication', () => {
    expect(PostgresAddressSchema.parse({ ...table, slot: 'orders_slot', publication: 'orders_pub' })).toEqual(
      {
        ...table,
        slot: 'orders_slot',
        publication: 'orders_pub',
      },
    );
    expect(pathsOf(PostgresAddressSchema, { ...table, slot: 'Orders-Slot' })).toEqual(['slot']);
    expect(pathsOf(PostgresAddressSchema, { ...table, publication: 'x'.repeat(64) })).toEqual([
      'publication',
    ]);
    expect(pathsOf(PostgresAddressSchema, { ...table, capture: 'poll', slot: 's' })).toEqual(['slot']);
    expect(pathsOf(PostgresAddressSchema, { ...table, capture: 'cdc' })).toEqual(['capture']);
    expect(PostgresAddressSchema.parse({ ...table, heartbeat: { intervalMs: 10_000 } }).heartbeat).toEqual({
      intervalMs: 10_000,
    });
    expect(
      pathsOf(PostgresAddressSchema, { ...table, capture: 'poll', heartbeat: { intervalMs: 1000 } }),
    ).toEqual(['heartbeat']);
    expect(pathsOf(PostgresAddressSchema, { ...table, heartbeat: { intervalMs: 5 } })).toEqual([
      'heartbeat.intervalMs',
    ]);
    expect(
      pathsOf(PostgresAddressSchema, { ...table, heartbeat: { intervalMs: 1000, table: 'a b' } }),
    ).toEqual(['heartbeat.table']);
    expect(
      pathsOf(PostgresAddressSchema, {
        type: 'postgres',
        connection: 'w',
        query: 'select 1',
        capture: 'replication',
      }),
    ).toEqual(['capture']);
  });
});

describe('JetStreamAddressSchema', () => {
  it('accepts a stream and subject, optionally a connection and key', () => {
    const address = {
      type: 'jetstream',
      stream: 'ORDERS',
      subject: 'orders.>',
      connection: 'bus',
      key: 'id',
    };
    expect(JetStreamAddressSchema.parse(address)).toEqual(address);
    expect(JetStreamAddressSchema.parse({ type: 'jetstream', stream: 'S', subject: 'a.*.b' })).toEqual({
      type: 'jetstream',
      stream: 'S',
      subject: 'a.*.b',
    });
  });

  it('refuses stream names with subject tokens or spaces, and subjects with spaces', () => {
    for (const stream of ['a.b', 'a*', 'a>', 'a b', '', 'x'.repeat(256)]) {
      expect(pathsOf(JetStreamAddressSchema, { type: 'jetstream', stream, subject: 's' })).toEqual([
        'stream',
      ]);
    }
    for (const subject of ['a b', 'a\tb', 'a\nb', '', 'x'.repeat(256)]) {
      expect(pathsOf(JetStreamAddressSchema, { type: 'jetstream', stream: 'S', subject })).toEqual([
        'subject',
      ]);
    }
    expect(
      pathsOf(JetStreamAddressSchema, {
        type: 'jetstream',
        stream: 'S',
        subject: 's',
        servers: ['nats://x'],
      }),
    ).toEqual(['servers']);
  });

  it('refuses subjects NATS cannot take: an empty token, or ">" before the last token', () => {
    for (const subject of ['orders..eu', '.orders', 'orders.', '.', 'orders.>.eu', '>.x']) {
      expect(pathsOf(JetStreamAddressSchema, { type: 'jetstream', stream: 'S', subject })).toEqual([
        'subject',
      ]);
    }
  });

  it('takes wildcards in what a source reads, never in the one subject a destination publishes to', () => {
    for (const subject of ['orders.*', 'orders.>', '>', '*.eu']) {
      expect(SourceAddressSchema.parse({ type: 'jetstream', stream: 'S', subject }).type).toBe('jetstream');
      expect(pathsOf(DestinationAddressSchema, { type: 'jetstream', stream: 'S', subject })).toEqual([
        'subject',
      ]);
    }
    expect(
      DestinationAddressSchema.parse({ type: 'jetstream', stream: 'S', subject: 'orders.eu' }).type,
    ).toBe('jetstream');
  });
});

describe('EndpointAddressSchema', () => {
  it('names a local endpoint', () => {
    expect(EndpointAddressSchema.parse({ type: 'endpoint', endpoint: 'items' })).toEqual({
      type: 'endpoint',
      endpoint: 'items',
    });
    expect(pathsOf(EndpointAddressSchema, { type: 'endpoint', endpoint: '../items' })).toEqual(['endpoint']);
    expect(pathsOf(EndpointAddressSchema, { type: 'endpoint' })).toEqual(['endpoint']);
  });
});

describe('source and destination unions', () => {
  it('dispatch on type', () => {
    expect(SourceAddressSchema.parse({ type: 'file', path: '/a' }).type).toBe('file');
    expect(SourceAddressSchema.parse({ type: 'postgres', connection: 'w', table: 't' }).type).toBe(
      'postgres',
    );
    expect(SourceAddressSchema.parse({ type: 'jetstream', stream: 'S', subject: 's' }).type).toBe(
      'jetstream',
    );
    expect(DestinationAddressSchema.parse({ type: 'endpoint', endpoint: 'items' }).type).toBe('endpoint');
  });

  it('never take an endpoint as a source', () => {
    expect(pathsOf(SourceAddressSchema, { type: 'endpoint', endpoint: 'items' })).toEqual(['type']);
  });

  it('report the path inside the chosen alternative', () => {
    expect(pathsOf(SourceAddressSchema, { type: 'file', path: 'a\0' })).toEqual(['path']);
    expect(pathsOf(DestinationAddressSchema, { type: 'jetstream', stream: 'a b', subject: 's' })).toEqual([
      'stream',
    ]);
    expect(pathsOf(SourceAddressSchema, 'file:///a')).toEqual(['(root)']);
    expect(pathsOf(SourceAddressSchema, null)).toEqual(['(root)']);
  });

  it('list the known types', () => {
    expect([...SOURCE_TYPES]).toEqual(['file', 'postgres', 'jetstream']);
    expect([...DESTINATION_TYPES]).toEqual(['file', 'postgres', 'jetstream', 'endpoint']);
  });
});

describe('assertKnownAddressType', () => {
  it('passes known types and anything schema validation must judge', () => {
    for (const type of SOURCE_TYPES) expect(() => assertKnownAddressType('source', { type })).not.toThrow();
    for (const type of DESTINATION_TYPES)
      expect(() => assertKnownAddressType('destination', { type })).not.toThrow();
    for (const value of [undefined, null, 'file', 5, [], {}, { type: 5 }, { type: null }]) {
      expect(() => assertKnownAddressType('source', value)).not.toThrow();
    }
  });

  it('refuses an unknown type with UNSUPPORTED_ADDRESS_TYPE (422)', () => {
    let caught: unknown;
    try {
      assertKnownAddressType('source', { type: 's3', bucket: 'b' });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(UnsupportedAddressTypeError);
    const err = caught as UnsupportedAddressTypeError;
    expect(err.code).toBe('UNSUPPORTED_ADDRESS_TYPE');
    expect(err.status).toBe(422);
    expect(err.details).toEqual({ role: 'source', type: 's3' });
    expect(err.message).toBe('Unsupported source type "s3"');
  });

  it('refuses an endpoint as a source but not as a destination', () => {
    expect(() => assertKnownAddressType('source', { type: 'endpoint' })).toThrow(UnsupportedAddressTypeError);
    expect(() => assertKnownAddressType('destination', { type: 'endpoint' })).not.toThrow();
  });

  it('is not fooled by inherited names and clips huge types', () => {
    for (const type of ['constructor', '__proto__', 'toString', 'hasOwnProperty', '', 'FILE', 'file ']) {
      expect(() => assertKnownAddressType('destination', { type }), type).toThrow(
        UnsupportedAddressTypeError,
      );
    }
    try {
      assertKnownAddressType('destination', { type: 'x'.repeat(100_000) });
      expect.unreachable();
    } catch (err) {
      expect(SluiceError.hasCode(err, 'UNSUPPORTED_ADDRESS_TYPE')).toBe(true);
      expect((err as SluiceError).details?.type).toBe('x'.repeat(64));
      expect((err as SluiceError).message.length).toBeLessThan(200);
    }
  });
});

describe('keyFields', () => {
  it('turns a key option into a list', () => {
    expect(keyFields(undefined)).toEqual([]);
    expect(keyFields('id')).toEqual(['id']);
    expect(keyFields(['region', 'id'])).toEqual(['region', 'id']);
  });
});
