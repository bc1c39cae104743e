import { SluiceError, ValidationError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import {
  allRecords,
  DIALECTS,
  LEASE_MS,
  makeRequest,
  owner,
  rawRequest,
  storeFixture,
  submitInput,
} from '../test/helpers.js';
import type { SqlDataPlaneStore } from './store.js';

const BAD_IDS: unknown[] = [
  '',
  'a'.repeat(201),
  'has space',
  '../etc/passwd',
  "x'; DROP TABLE transfers; --",
  'nul\u0000byte',
  'ünïcode',
  123,
  null,
  undefined,
  { id: 'a' },
  ['a'],
];

/** Runs `op`, expects a VALIDATION_FAILED error naming at least one path. */
async function expectInvalid(op: () => Promise<unknown>): Promise<void> {
  const err = await op().then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, 'expected a validation error').toBeInstanceOf(ValidationError);
  expect((err as ValidationError).code).toBe('VALIDATION_FAILED');
  expect((err as ValidationError).errors.length).toBeGreaterThan(0);
}

/** A snapshot of everything stored, to prove a rejected call wrote nothing. */
async function snapshot(store: SqlDataPlaneStore) {
  return {
    transfers: await allRecords(store),
    nodes: (await store.listNodes()).map(({ silentMs: _, ...node }) => node),
  };
}

describe.each(DIALECTS)('hostile input on %s', (dialect) => {
  it('ids out of spec → VALIDATION_FAILED on every operation, nothing written', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const existing = (await store.submit(submitInput(makeRequest()))).record;
    const before = await snapshot(store);
    for (const id of BAD_IDS) {
      const bad = id as string;
      await expectInvalid(() => store.submit(submitInput(rawRequest(bad))));
      await expectInvalid(() => store.get(bad));
      await expectInvalid(() => store.takeOver(bad, 1, owner(), LEASE_MS));
      await expectInvalid(() => store.transition(bad, 1, { to: 'IN_PROGRESS' }));
      await expectInvalid(() => store.saveCheckpoint(bad, 1, {}));
      await expectInvalid(() => store.release(bad, 1));
    }
    expect(await snapshot(store)).toEqual(before);
    expect(await store.get(existing.id)).toEqual(existing);
  });

  it('huge bodies and checkpoints → VALIDATION_FAILED, nothing written', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest()));
    const before = await snapshot(store);
    // 64 properties of 60 KB each: every field within its own limit, 3.8 MB in all.
    const props: Record<string, string> = {};
    for (let i = 0; i < 64; i++) props[`p${i}`] = 'x'.repeat(60_000);
    await expectInvalid(() => store.submit(submitInput(rawRequest('huge-1', props))));
    // A single field over its limit.
    await expectInvalid(() => store.submit(submitInput(rawRequest('huge-2', { big: 'y'.repeat(70_000) }))));
    await expectInvalid(() => store.saveCheckpoint(record.id, 1, { blob: 'z'.repeat(2 * 1024 * 1024) }));
    await expectInvalid(() => store.saveCheckpoint(record.id, 1, { blob: '€'.repeat(400_000) })); // 1.2 MB UTF-8
    expect(await snapshot(store)).toEqual(before);
  });

  it('wrong types and shapes → VALIDATION_FAILED, nothing written', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const { record } = await store.submit(submitInput(makeRequest()));
    const before = await snapshot(store);
    const good = submitInput(makeRequest());
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['submit(null)', () => store.submit(null as never)],
      ['submit("x")', () => store.submit('x' as never)],
      ['request missing', () => store.submit({ ...good, request: undefined as never })],
      [
        'request unknown field',
        () => store.submit({ ...good, request: { ...good.request, evil: 1 } as never }),
      ],
      [
        'request unknown source',
        () => store.submit({ ...good, request: { ...good.request, source: { type: 'ftp' } } as never }),
      ],
      [
        'fire-and-forget',
        () => store.submit({ ...good, request: { ...good.request, mode: 'fire-and-forget' } }),
      ],
      [
        '__proto__ property',
        () => store.submit(submitInput(rawRequest('p1', JSON.parse('{"__proto__":"x"}')))),
      ],
      ['hash empty', () => store.submit({ ...good, requestHash: '' })],
      ['hash huge', () => store.submit({ ...good, requestHash: 'a'.repeat(129) })],
      ['hash injection', () => store.submit({ ...good, requestHash: "a' OR '1'='1" })],
      ['hash number', () => store.submit({ ...good, requestHash: 42 as never })],
      ['owner null', () => store.submit({ ...good, owner: null as never })],
      ['owner nodeId bad', () => store.submit({ ...good, owner: { ...good.owner, nodeId: '1 bad' } })],
      [
        'owner address huge',
        () => store.submit({ ...good, owner: { ...good.owner, address: 'h'.repeat(3000) } }),
      ],
      ['owner instance bad', () => store.submit({ ...good, owner: { ...good.owner, instanceId: 'a b' } })],
      ['lease 0', () => store.submit({ ...good, leaseMs: 0 })],
      ['lease negative', () => store.submit({ ...good, leaseMs: -5 })],
      ['lease fractional', () => store.submit({ ...good, leaseMs: 1.5 })],
      ['lease NaN', () => store.submit({ ...good, leaseMs: Number.NaN })],
      ['lease Infinity', () => store.submit({ ...good, leaseMs: Number.POSITIVE_INFINITY })],
      ['lease string', () => store.submit({ ...good, leaseMs: '1000' as never })],
      ['lease > 1 day', () => store.submit({ ...good, leaseMs: 86_400_001 })],
      ['epoch 0', () => store.takeOver(record.id, 0, owner(), LEASE_MS)],
      ['epoch string', () => store.takeOver(record.id, '1' as never, owner(), LEASE_MS)],
      ['epoch fractional', () => store.transition(record.id, 1.5, { to: 'IN_PROGRESS' })],
      ['epoch huge', () => store.saveCheckpoint(record.id, 2 ** 60, {})],
      ['takeover owner bad', () => store.takeOver(record.id, 1, { nodeId: 'x' } as never, LEASE_MS)],
      ['transition input null', () => store.transition(record.id, 1, null as never)],
      ['transition to unknown', () => store.transition(record.id, 1, { to: 'DONE' as never })],
      ['transition to lowercase', () => store.transition(record.id, 1, { to: 'in_progress' as never })],
      [
        'transition bad result',
        () => store.transition(record.id, 1, { to: 'TERMINATED', result: { recordsRead: -1 } as never }),
      ],
      [
        'transition bad error',
        () => store.transition(record.id, 1, { to: 'TERMINATED', error: { code: 5 } as never }),
      ],
      ['checkpoint undefined', () => store.saveCheckpoint(record.id, 1, undefined)],
      ['checkpoint circular', () => store.saveCheckpoint(record.id, 1, circular)],
      ['checkpoint bigint', () => store.saveCheckpoint(record.id, 1, { n: 10n })],
      ['checkpoint lease bad', () => store.saveCheckpoint(record.id, 1, {}, -1)],
      [
        'heartbeat owner bad',
        () => store.heartbeat({ nodeId: 'n', address: 7, instanceId: 'i' } as never, LEASE_MS),
      ],
      [
        'heartbeat instance empty',
        () => store.heartbeat({ nodeId: 'n', address: '', instanceId: '' }, LEASE_MS),
      ],
      ['heartbeat lease bad', () => store.heartbeat(owner(), 0)],
      ['recover limit 0', () => store.recoverExpired(owner(), LEASE_MS, 0)],
      ['recover limit huge', () => store.recoverExpired(owner(), LEASE_MS, 1_000_000)],
      ['list limit 0', () => store.list({ limit: 0 })],
      ['list limit huge', () => store.list({ limit: 10_001 })],
      ['list state bad', () => store.list({ state: 'NOPE' as never })],
      ['list owner bad', () => store.list({ ownerNodeId: "' OR 1=1" })],
      ['list cursor garbage', () => store.list({ cursor: 'not-a-cursor' })],
      ['list cursor forged', () => store.list({ cursor: Buffer.from("t1:' OR 1=1").toString('base64url') })],
      ['list input string', () => store.list('x' as never)],
      ['purge age not a number', () => store.purge('2020-01-01' as never)],
      ['purge age a date', () => store.purge(new Date(0) as never)],
      ['purge age NaN', () => store.purge(Number.NaN)],
      ['purge age negative', () => store.purge(-1)],
      ['register null', () => store.registerNode(null as never)],
      ['register bad id', () => store.registerNode({ nodeId: '', address: 'a', instanceId: 'i' })],
      ['register bad startedAt', () => store.registerNode({ ...owner(), startedAt: 'yesterday' as never })],
      ['touch bad id', () => store.touchNode('../x')],
    ];
    for (const [name, op] of cases) {
      const err = await op().then(
        () => null,
        (e: unknown) => e,
      );
      expect(SluiceError.isInstance(err) ? err.code : err, name).toBe('VALIDATION_FAILED');
    }
    expect(await snapshot(store)).toEqual(before);
  });

  it('values that look like SQL are stored verbatim, never executed', async () => {
    await using fx = await storeFixture(dialect);
    const store = await fx.open();
    const sneaky = makeRequest('x--1', { note: "'); DELETE FROM transfers; --" });
    const { record } = await store.submit(
      submitInput(sneaky, { ...owner(), address: "http://a'; DROP TABLE nodes; --" }),
    );
    await store.registerNode({ nodeId: 'node-a', address: "'); DELETE FROM nodes; --", instanceId: 'i-1' });
    expect(await store.get('x--1')).toEqual(record);
    expect(record.request.properties.note).toBe("'); DELETE FROM transfers; --");
    expect((await store.listNodes())[0]?.address).toBe("'); DELETE FROM nodes; --");
  });
});
