import { type CacheSchema, parseQuery, SluiceError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import { schemaHash } from './schema.js';

const schema: CacheSchema = { fields: { id: 'integer', v: 'integer' }, primaryKey: ['id'], indexes: [['v']] };

const checkpoint = (epoch: number) => ({
  dag: 'd1',
  epoch,
  positions: { src: epoch },
  at: new Date().toISOString(),
});

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (err) {
    return SluiceError.isInstance(err) ? err.code : String(err);
  }
  return undefined;
};

describe('fields added to a generation', () => {
  it('are checked from addFields on, queryable by a reader that has the generation open from the commit that lands them, and leave the schema identity alone', async () => {
    await using dir = await tempDir();
    await using writer = await openCacheManager(dir.path);
    await using readers = await openCacheManager(dir.path, { readOnly: true });
    const cache = await writer.create({ endpoint: 'items', schema });
    cache.apply([{ op: 'upsert', record: { id: 1, v: 1 } }]);
    await cache.commit(checkpoint(1));
    const reader = await readers.openRo(cache.name);
    const before = reader.schema;
    const byNote = parseQuery({ $filter: { note: 'x' } });
    expect(codeOf(() => reader.query(byNote))).toBe('INVALID_QUERY');

    cache.addFields({ note: 'string', v: 'integer' }); // `v` is already there with that type: nothing to add
    expect(cache.schema.fields).toEqual({ id: 'integer', v: 'integer', note: 'string' });
    // Checked like a declared field from now on; nothing of a refused batch is staged.
    expect(codeOf(() => cache.apply([{ op: 'upsert', record: { id: 2, v: 2, note: 3 } }]))).toBe(
      'BAD_RECORD',
    );
    cache.apply([{ op: 'upsert', record: { id: 2, v: 2, note: 'x' } }]);
    // Not before the commit that holds it.
    expect(codeOf(() => reader.query(byNote))).toBe('INVALID_QUERY');
    await cache.commit(checkpoint(2));

    expect(reader.query(byNote).records).toEqual([{ id: 2, v: 2, note: 'x' }]);
    expect(reader.count({ note: null })).toBe(1); // the record written before it reads it as null
    expect(reader.schema).not.toBe(before);
    expect(reader.schema.fields.note).toBe('string');
    expect(reader.schema).toBe(reader.schema); // one object per stored schema

    // Its identity is the schema it was created with: opening it for writing with that schema continues it.
    expect((await writer.info(cache.name))?.schemaHash).toBe(schemaHash(schema));
    await cache.close();
    await using again = await writer.openRw(cache.name, schema);
    expect(again.schema.fields.note).toBe('string');
    await using fresh = await readers.openRo(cache.name);
    expect(fresh.query(byNote).records).toHaveLength(1);
    await reader.close();
  });

  it('refuses a field of another type than the one it has, or an invalid name or type, and changes nothing', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    expect(codeOf(() => cache.addFields({ v: 'string' }))).toBe('VALIDATION_FAILED');
    expect(codeOf(() => cache.addFields({ $bad: 'string' }))).toBe('VALIDATION_FAILED');
    expect(codeOf(() => cache.addFields({ note: 'text' as never }))).toBe('VALIDATION_FAILED');
    expect(cache.schema).toEqual(schema);
  });
});
