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
// A table with REPLICA IDENTITY FULL: every update and delete carries the whole old row.
const fullItems = { ...items, replicaIdentity: 'full' };
const fullUpdate = (old: Record<string, unknown>, row: Record<string, unknown>) =>
  ({ tag: 'update', relation: fullItems, key: null, old, new: row }) as never;
const fullDelete = (old: Record<string, unknown>) =>
  ({ tag: 'delete', relation: fullItems, key: null, old }) as never;

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
        transaction: '7',
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

  it('under REPLICA IDENTITY FULL, tells each key its net effect: a key two rows hold inside the transaction never loses the row that stays', () => {
    const txn = assembler();
    txn.begin(begin);
    // UPDATE items SET id = id + 1 on rows 1, 2 (a deferrable key): row 1 lands on 2 while row 2 still holds it.
    txn.change(fullUpdate({ id: 1, v: 'a' }, { id: 2, v: 'a' }), 100);
    txn.change(fullUpdate({ id: 2, v: 'b' }, { id: 3, v: 'b' }), 100);
    txn.settle();
    expect(txn.take('P', { flush: true }).ops).toEqual([
      { op: 'delete', key: [1], at: { source: 'pg', position: '0/10:0:old' } },
      { op: 'upsert', record: { id: 2, v: 'a' }, at: { source: 'pg', position: '0/10:0' } },
      { op: 'upsert', record: { id: 3, v: 'b' }, at: { source: 'pg', position: '0/10:1' } },
    ]);
  });

  it('under REPLICA IDENTITY FULL, any order of key moves, inserts and deletes in one transaction ends as the table', () => {
    let seed = 42;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = (n: number) => Math.floor(random() * n);
    for (let trial = 0; trial < 300; trial++) {
      const size = 1 + pick(8);
      const space = size + 3;
      let rows = Array.from({ length: size }, (_, i) => ({ id: i + 1, v: `r${trial}.${i}` }));
      const mirror = new Map(rows.map((row) => [row.id, { ...row }]));
      // What the transaction leaves: some rows deleted, new ones inserted, every survivor on a distinct key.
      const keysAtCommit = Array.from({ length: space }, (_, i) => i + 1).sort(() => random() - 0.5);
      const plans = rows.map((row) => ({ row, deleted: random() < 0.2, path: [] as number[] }));
      const inserts = Array.from({ length: pick(3) }, (_, i) => ({ v: `n${trial}.${i}`, id: 0 }));
      for (const plan of plans) {
        // Keys in between may be held by another row (checked only at commit).
        plan.path = Array.from({ length: pick(3) }, () => 1 + pick(space));
        if (!plan.deleted) plan.path.push(keysAtCommit.pop()!);
      }
      for (const insert of inserts) insert.id = keysAtCommit.pop()!;
      // Events of each row in its order, rows interleaved at random.
      const events: Array<() => unknown> = [];
      const queues = [
        ...plans.map((plan) => {
          let current = { ...plan.row };
          const steps: Array<() => unknown> = plan.path.map((id) => () => {
            const next = { ...current, id };
            const message = fullUpdate(current, next);
            current = next;
            return message;
          });
          if (plan.deleted) steps.push(() => fullDelete(current));
          return steps;
        }),
        ...inserts.map((row) => [() => insert({ ...row }, fullItems)]),
      ];
      while (queues.some((q) => q.length > 0)) {
        const open = queues.filter((q) => q.length > 0);
        events.push(open[pick(open.length)]!.shift()!);
      }
      const txn = assembler();
      txn.begin(begin);
      const apply = (batch: ReturnType<typeof txn.take>) => {
        for (const op of batch.kind === 'records' ? batch.ops : []) {
          if (op.op === 'delete') mirror.delete(op.key[0] as number);
          else if (op.op === 'upsert') mirror.set(op.record.id as number, op.record as never);
        }
      };
      for (const event of events) if (txn.change(event() as never, 2)) apply(txn.take('P', { open: true }));
      txn.settle();
      while (txn.pending > 2) apply(txn.take('P', { open: true, limit: 2 }));
      apply(txn.take('P', { end: true }));
      rows = [
        ...plans.filter((p) => !p.deleted).map((p) => ({ id: p.path.at(-1)!, v: p.row.v })),
        ...inserts,
      ];
      const table = new Map(rows.map((row) => [row.id, row]));
      expect(new Map([...mirror].sort(([a], [b]) => a - b)), `trial ${trial}`).toEqual(
        new Map([...table].sort(([a], [b]) => a - b)),
      );
    }
  });

  it('ignores row changes outside a transaction and refuses to take a part of none', () => {
    const txn = assembler();
    expect(txn.change(insert({ id: 1 }), 1)).toBe(false);
    expect(txn.changed).toBe(false);
    expect(() => txn.take('P')).toThrow(/no open transaction/);
  });
});
