import { describe, expect, it } from 'vitest';
import { TransactionAssembler } from './transaction-assembler.js';

const items = { schema: 'public', name: 'items' };
const other = { schema: 'public', name: 'other' };

function assembler() {
  return new TransactionAssembler({
    handle: 'pg',
    table: 'public.items',
    keys: ['id'],
    ours: (relation) => relation.schema === 'public' && relation.name === 'items',
  });
}

// pgoutput messages as pg-logical-replication parses them (only the fields the assembler reads).
const begin = { tag: 'begin', commitLsn: '0/10', xid: 7 } as never;
const insert = (row: Record<string, unknown>, relation = items) =>
  ({ tag: 'insert', relation, new: row }) as never;
const update = (key: Record<string, unknown> | null, row: Record<string, unknown>) =>
  ({ tag: 'update', relation: items, key, old: null, new: row }) as never;
const remove = (key: Record<string, unknown> | null) =>
  ({ tag: 'delete', relation: items, key, old: null }) as never;

describe('TransactionAssembler', () => {
  it('turns inserts, updates and deletes into upserts and deletes positioned within the transaction', () => {
    const txn = assembler();
    txn.begin(begin);
    expect(txn.change(insert({ id: 1, name: 'a' }), 100)).toBe(false);
    txn.change(update(null, { id: 1, name: 'b' }), 100);
    txn.change(remove({ id: 1 }), 100);
    expect(txn.changed).toBe(true);
    const batch = txn.take('P', { flush: true });
    expect(batch).toEqual({
      kind: 'records',
      ops: [
        { op: 'upsert', record: { id: 1, name: 'a' }, at: { source: 'pg', position: '0/10:0' } },
        { op: 'upsert', record: { id: 1, name: 'b' }, at: { source: 'pg', position: '0/10:1' } },
        { op: 'delete', key: [1], at: { source: 'pg', position: '0/10:2' } },
      ],
      read: 3,
      bad: [],
      position: 'P',
      flush: true,
    });
    txn.end();
    expect(txn.open).toBe(false);
  });

  it('deletes the record under the old key when an update changes the primary key', () => {
    const txn = assembler();
    txn.begin(begin);
    txn.change(update({ id: 1 }, { id: 2, name: 'moved' }), 100);
    txn.change(update({ id: 2 }, { id: 2, name: 'same key' }), 100);
    expect(txn.take('P').ops).toEqual([
      { op: 'delete', key: [1], at: { source: 'pg', position: '0/10:0:old' } },
      { op: 'upsert', record: { id: 2, name: 'moved' }, at: { source: 'pg', position: '0/10:0' } },
      { op: 'upsert', record: { id: 2, name: 'same key' }, at: { source: 'pg', position: '0/10:1' } },
    ]);
  });

  it('reports a delete without its key as bad; an update lacking unchanged TOAST values says which columns it leaves unchanged', () => {
    const txn = assembler();
    txn.begin(begin);
    txn.change(remove(null), 100);
    txn.change(update(null, { id: 3, qty: 4, body: undefined, meta: undefined }), 100);
    const batch = txn.take('P');
    expect(batch.kind === 'records' && batch.ops).toEqual([
      {
        op: 'upsert',
        record: { id: 3, qty: 4 },
        unchanged: ['body', 'meta'],
        at: { source: 'pg', position: '0/10:1' },
      },
    ]);
    expect(batch.kind === 'records' && batch.bad.map((b) => b.reason)).toEqual([
      'a delete without its key columns',
    ]);
    expect(batch.kind === 'records' && batch.read).toBe(2);
  });

  it('says when a part is full, and hands out each operation once across parts', () => {
    const txn = assembler();
    txn.begin(begin);
    expect(txn.change(insert({ id: 1 }), 2)).toBe(false);
    expect(txn.change(insert({ id: 2 }), 2)).toBe(true);
    const first = txn.take('P', { open: true });
    expect(first.kind === 'records' && first.open).toBe(true);
    expect(first.kind === 'records' && first.ops.map((o) => o.op === 'upsert' && o.record.id)).toEqual([
      1, 2,
    ]);
    txn.change(insert({ id: 3 }), 2);
    const rest = txn.take('P');
    expect(rest.kind === 'records' && rest.ops.map((o) => o.op === 'upsert' && o.record.id)).toEqual([3]);
  });

  it('ignores other tables, and a truncate of the table drops what the transaction did before it', () => {
    const txn = assembler();
    txn.begin(begin);
    txn.change(insert({ id: 9 }, other), 100);
    expect(txn.changed).toBe(false);
    txn.change(insert({ id: 1 }), 100);
    txn.truncate({ tag: 'truncate', relations: [other] } as never);
    expect(txn.take('P').kind === 'records').toBe(true);
    txn.change(insert({ id: 2 }), 100);
    txn.truncate({ tag: 'truncate', relations: [items] } as never);
    txn.change(insert({ id: 3 }), 100);
    const batch = txn.take('P');
    expect(batch.kind === 'records' && batch.truncate).toBe(true);
    expect(batch.kind === 'records' && batch.ops.map((o) => o.op === 'upsert' && o.record.id)).toEqual([3]);
  });

  it('ignores row changes outside a transaction and refuses to take a part of none', () => {
    const txn = assembler();
    expect(txn.change(insert({ id: 1 }), 1)).toBe(false);
    expect(txn.changed).toBe(false);
    expect(() => txn.take('P')).toThrow(/no open transaction/);
  });
});
