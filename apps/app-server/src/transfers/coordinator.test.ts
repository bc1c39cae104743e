import { join } from 'node:path';
import { createSingleNodeBackplane } from '@sluice/backplane';
import {
  type Backplane,
  type DataPlaneStore,
  isTerminal,
  type OwnerIdentity,
  parseTransferRequest,
  requestHash,
  SinkError,
  SluiceError,
  StoreUnavailableError,
  silentLogger,
  systemClock,
  type TransferRequest,
} from '@sluice/core';
import { openStore } from '@sluice/store';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../metrics.js';
import { RequestPolicy } from './confinement.js';
import type { TransferExecutor } from './context.js';
import { TransferCoordinator } from './coordinator.js';
import { MAX_RETRIES } from './execution.js';

/**
 * Unit tests of the coordinator on a real (temporary) SQLite store and the in-process backplane. The store is
 * wrapped only to hold a statement at a chosen moment (the timing windows of issue 13) — every write still lands
 * in SQLite. The multi-process tests in ../../test cover the same protocol with real processes.
 */

const LIMITS = {
  leaseMs: 600,
  heartbeatMs: 100,
  ownerWaitMs: 100,
  sweepIntervalMs: 60_000,
  maxConcurrentTransfers: 4,
  queueSize: 8,
  fireAndForgetConcurrency: 2,
  shutdownGraceMs: 2_000,
};

function identity(nodeId: string, instanceId = `${nodeId}-i1`): OwnerIdentity {
  return { nodeId, address: `http://${nodeId}.invalid`, instanceId };
}

/** A gate a wrapped store statement waits on. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  let reached!: () => void;
  const hit = new Promise<void>((resolve) => {
    reached = resolve;
  });
  return { open, opened, hit, reached };
}

/** An executor that runs until aborted (or until `finish` is called), counting starts. */
function foreverExecutor() {
  const state = { starts: 0, running: 0, finish: () => {} };
  const execute: TransferExecutor = (_request, context) => {
    state.starts++;
    state.running++;
    return new Promise((resolve, reject) => {
      if (context.signal.aborted) {
        state.running--;
        reject(context.signal.reason);
        return;
      }
      state.finish = () => {
        state.running--;
        resolve({ recordsRead: 1, recordsWritten: 1, badRecords: 0 });
      };
      context.signal.addEventListener('abort', () => {
        state.running--;
        reject(context.signal.reason);
      });
    });
  };
  return { state, execute };
}

async function setup() {
  const dir = await tempDir();
  const store = await openStore(`sqlite:${join(dir.path, 'store.db')}`);
  const policy = new RequestPolicy({ roots: [dir.path], connections: {}, endpoints: [], cwd: dir.path });
  const request = (id: string): TransferRequest =>
    parseTransferRequest({
      id,
      mode: 'idempotent',
      source: { type: 'file', path: join(dir.path, `${id}.in.jsonl`), format: 'jsonl' },
      destination: { type: 'file', path: join(dir.path, `${id}.out.jsonl`), format: 'jsonl' },
    });
  const coordinators: TransferCoordinator[] = [];
  const coordinator = (options: {
    store?: DataPlaneStore;
    backplane: Backplane;
    identity: OwnerIdentity;
    execute: TransferExecutor;
    limits?: Partial<typeof LIMITS>;
  }) => {
    const created = new TransferCoordinator({
      store: options.store ?? store,
      backplane: options.backplane,
      identity: options.identity,
      limits: { ...LIMITS, ...options.limits },
      policy,
      execute: options.execute,
      metrics: createMetrics({
        transfers: () => ({ running: 0, queued: 0, fireAndForget: 0 }),
        pipelines: () => [],
      }),
      logger: silentLogger,
      clock: systemClock,
    });
    coordinators.push(created);
    return created;
  };
  return {
    store,
    request,
    coordinator,
    /** A record owned by a node that is gone (inserted directly, nobody serves it). */
    async abandoned(id: string, owner = identity('gone')) {
      const req = request(id);
      await store.submit({ request: req, requestHash: requestHash(req), owner, leaseMs: LIMITS.leaseMs });
      return req;
    },
    async [Symbol.asyncDispose]() {
      for (const c of coordinators) await c.shutdown();
      await store.close();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** A store whose method `name` runs `around` instead (which may call the real one). */
function wrapStore<K extends keyof DataPlaneStore>(
  store: DataPlaneStore,
  name: K,
  around: (
    real: DataPlaneStore[K],
    ...args: Parameters<Extract<DataPlaneStore[K], (...a: never[]) => unknown>>
  ) => unknown,
): DataPlaneStore {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (prop !== name || typeof value !== 'function')
        return typeof value === 'function' ? value.bind(target) : value;
      const real = value.bind(target) as DataPlaneStore[K];
      return (...args: never[]) => around(real, ...(args as never));
    },
  });
}

/** A backplane whose `whoRuns` runs `around` instead (which may ask the real one). */
function wrapWhoRuns(
  backplane: Backplane,
  around: (
    real: Backplane['whoRuns'],
    ...args: Parameters<Backplane['whoRuns']>
  ) => ReturnType<Backplane['whoRuns']>,
): Backplane {
  return new Proxy(backplane, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      if (prop !== 'whoRuns') return value.bind(target);
      return (...args: Parameters<Backplane['whoRuns']>) => around(target.whoRuns.bind(target), ...args);
    },
  });
}

/**
 * A store whose owner-claiming statements (`takeOver`, and `recoverExpired` the sweeper of earlier versions used)
 * wait on `held`: `before` they run, or `after-commit` with their reply held back.
 */
function holdOwnerClaims(
  store: DataPlaneStore,
  held: ReturnType<typeof gate>,
  when: 'before' | 'after-commit',
): DataPlaneStore {
  const hold = async (call: () => Promise<unknown>) => {
    if (when === 'before') {
      held.reached();
      await held.opened;
      return call();
    }
    const result = await call();
    held.reached();
    await held.opened;
    return result;
  };
  const claims = wrapStore(store, 'takeOver', (real, ...args) =>
    hold(() => (real as DataPlaneStore['takeOver'])(...(args as Parameters<DataPlaneStore['takeOver']>))),
  );
  return wrapStore(claims, 'recoverExpired', (real, ...args) =>
    hold(() =>
      (real as DataPlaneStore['recoverExpired'])(...(args as Parameters<DataPlaneStore['recoverExpired']>)),
    ),
  );
}

/**
 * A store whose heartbeats wait while held (`hold()` resolves once a heartbeat waits; `release()` lets it and
 * every later one through): a heartbeat slower than the lease, as under a backlog of thousands.
 */
function holdHeartbeats(store: DataPlaneStore) {
  let held: ReturnType<typeof gate> | null = null;
  const wrapped = wrapStore(store, 'heartbeat', async (real, ...args) => {
    const hold = held;
    if (hold) {
      hold.reached();
      await hold.opened;
    }
    return (real as DataPlaneStore['heartbeat'])(...(args as Parameters<DataPlaneStore['heartbeat']>));
  });
  return {
    store: wrapped,
    /** Resolves with this process's monotonic time once a heartbeat waits. */
    async hold(): Promise<number> {
      held = gate();
      await held.hit;
      return performance.now();
    },
    release(): void {
      const gateOfLateBeat = held;
      held = null;
      gateOfLateBeat?.open();
    },
  };
}

/**
 * A lease long enough that only a held heartbeat makes it run out: on a loaded machine one heartbeat statement
 * may take hundreds of ms, and with the suite's 600 ms lease such a spike alone let the watchdog stop a run (as
 * it should).
 */
const HELD_BEAT_LEASE_MS = 2_500;

/** Node `q` on `store`, running one transfer at a time with {@link HELD_BEAT_LEASE_MS}, started, `ids` submitted. */
async function startOneAtATime(
  t: Awaited<ReturnType<typeof setup>>,
  backplane: Backplane,
  store: DataPlaneStore,
  execute: TransferExecutor,
  ids: string[],
): Promise<void> {
  const c = t.coordinator({
    store,
    backplane,
    identity: identity('q'),
    execute,
    limits: { maxConcurrentTransfers: 1, leaseMs: HELD_BEAT_LEASE_MS },
  });
  c.start();
  for (const id of ids) expect((await c.submit(t.request(id))).outcome).toBe('created');
}

/** An executor whose first run fails as an unreachable peer does (retryable), and whose later runs complete. */
function failsFirstRun() {
  let runs = 0;
  const execute: TransferExecutor = async () => {
    runs++;
    if (runs === 1)
      throw new SinkError('JetStream publish to x failed: timeout', { details: { retryable: true } });
    return { recordsRead: 3, recordsWritten: 3, badRecords: 0 };
  };
  return { execute, runs: () => runs };
}

async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('TransferCoordinator', () => {
  it('defect 2: a terminate that arrives while a takeover claim is in flight leaves no zombie', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('zombie-1');
    const held = gate();
    const store = wrapStore(t.store, 'takeOver', async (real, ...args) => {
      held.reached();
      await held.opened;
      return (real as DataPlaneStore['takeOver'])(...(args as Parameters<DataPlaneStore['takeOver']>));
    });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ store, backplane, identity: identity('b'), execute });
    b.start();
    const submitted = b.submit(request);
    await held.hit;
    // Another node's terminate reaches b's responder over the backplane while the claim waits on the store.
    const terminated = backplane.terminate('zombie-1', { timeoutMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    held.open();
    await submitted.catch(() => {});
    expect((await terminated).status).toBe('terminated');
    const record = await t.store.get('zombie-1');
    expect(record?.state).toBe('TERMINATED');
    expect(record?.epoch).toBe(2);
    expect(state.starts).toBe(0);
    // Nothing keeps answering for it or renewing it.
    expect((await backplane.whoRuns('zombie-1', { timeoutMs: 50 })).status).toBe('nobody');
    expect(b.stats().running + b.stats().queued).toBe(0);
  });

  it('defect: a resend that looked the owner up before this node took the transfer over stopped the new run and took it over again (epoch 3, from itself)', async () => {
    await using t = await setup();
    await using real = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('stale-resend-1');
    // The first resend's owner lookup answers "nobody" (the owner crashed), and that answer reaches it only after
    // a second resend took the transfer over: it still holds the record as it was (owner gone, epoch 1).
    const held = gate();
    let lookups = 0;
    const backplane = wrapWhoRuns(real, async (whoRuns, ...args) => {
      const answer = await whoRuns(...args);
      if (++lookups === 1) {
        held.reached();
        await held.opened;
      }
      return answer;
    });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ backplane, identity: identity('b'), execute });
    b.start();
    const late = b.submit(request);
    await held.hit;
    expect((await b.submit(request)).outcome).toBe('resumed');
    await eventually(() => state.running === 1);
    held.open();
    expect((await late).outcome).toBe('running');
    const record = await t.store.get('stale-resend-1');
    expect({ epoch: record?.epoch, attempts: record?.attempts, owner: record?.ownerNodeId }).toEqual({
      epoch: 2,
      attempts: 2,
      owner: 'b',
    });
    expect({ starts: state.starts, running: state.running }).toEqual({ starts: 1, running: 1 });
  });

  it('defect: a resend whose every pass was contended answered 202 running with the record it read last, even when that record was finished', async () => {
    await using t = await setup();
    await using real = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('contended-1');
    // Every owner lookup names an owner at a newer epoch than the record read (other nodes taking it over again and
    // again): each pass looks again, until the passes run out. Meanwhile the transfer ends, terminated elsewhere.
    let lookups = 0;
    const backplane = wrapWhoRuns(real, async (_whoRuns, id) => {
      const record = await t.store.get(id);
      if (++lookups === 8) await t.store.transition(id, record!.epoch, { to: 'TERMINATED' });
      return {
        status: 'owner' as const,
        owner: { nodeId: 'elsewhere', address: 'http://elsewhere.invalid', epoch: record!.epoch + 1 },
      };
    });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ backplane, identity: identity('b'), execute });
    const answer = await b.submit(request);
    expect(lookups).toBe(8);
    // A finished transfer's resend is owed its stored outcome, whatever the passes before it saw.
    expect({ outcome: answer.outcome, state: 'transfer' in answer ? answer.transfer.state : null }).toEqual({
      outcome: 'stored',
      state: 'TERMINATED',
    });
    expect(state.starts).toBe(0);
  });

  it('defect: a resend that read the record before this node took the transfer over answered the new owner with the old epoch (epoch 1, owner b)', async () => {
    await using t = await setup();
    await using real = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('stale-view-1');
    // The first resend read the record (owner gone, epoch 1); its owner lookup runs only once a second resend
    // took the transfer over, so the backplane names the new owner at epoch 2.
    const held = gate();
    let lookups = 0;
    const backplane = wrapWhoRuns(real, async (whoRuns, ...args) => {
      if (++lookups === 1) {
        held.reached();
        await held.opened;
      }
      return whoRuns(...args);
    });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ backplane, identity: identity('b'), execute });
    b.start();
    const late = b.submit(request);
    await held.hit;
    expect((await b.submit(request)).outcome).toBe('resumed');
    await eventually(() => state.running === 1);
    held.open();
    const answer = await late;
    const record = await t.store.get('stale-view-1');
    expect(record).toMatchObject({ epoch: 2, attempts: 2, ownerNodeId: 'b' });
    // Every answer agrees with the stored record: the owner it names at the epoch it owns it.
    expect(answer).toMatchObject({
      outcome: 'running',
      transfer: { epoch: 2, attempts: 2, owner: { nodeId: 'b' } },
    });
  });

  it('defect 3: terminating a silent owner with a fresh lease never records TERMINATED while it works', async () => {
    await using t = await setup();
    await using backplaneA = createSingleNodeBackplane({ nodeId: 'a' });
    const { state, execute } = foreverExecutor();
    const a = t.coordinator({ backplane: backplaneA, identity: identity('a'), execute });
    a.start();
    await a.submit(t.request('silent-1'));
    await eventually(() => state.running === 1);
    // b's backplane reaches a's subscription, but a does not answer in time (hung, or just busy).
    await using backplaneB = createSingleNodeBackplane({ nodeId: 'b' });
    const silent = {
      status: 'unknown',
      reason: 'the owner did not answer within the wait',
      silent: true,
    } as const;
    const deaf = new Proxy(backplaneB, {
      get(target, prop, receiver) {
        if (prop === 'terminate' || prop === 'whoRuns') return async () => silent;
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as Backplane;
    const b = t.coordinator({ backplane: deaf, identity: identity('b'), execute: foreverExecutor().execute });
    const error = await b.terminate('silent-1').catch((err: unknown) => err);
    expect(SluiceError.hasCode(error, 'BACKPLANE_UNAVAILABLE')).toBe(true);
    const record = await t.store.get('silent-1');
    expect(record?.state).toBe('IN_PROGRESS');
    expect(record?.ownerNodeId).toBe('a');
    expect(record?.epoch).toBe(1);
    expect(state.running).toBe(1);
  });

  it('defect 3: terminating an abandoned transfer is one statement (a failing second write cannot leave this node owning it)', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('atomic-1');
    // Every plain transition fails: a terminate built from takeOver + transition would now own a live transfer.
    const store = wrapStore(t.store, 'transition', async () => {
      throw new StoreUnavailableError('injected: the store went away after the takeover');
    });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ store, backplane, identity: identity('b'), execute });
    b.start();
    const view = await b.terminate(request.id).catch(() => null);
    await b.heartbeat();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const record = await t.store.get('atomic-1');
    expect(view?.state).toBe('TERMINATED');
    expect(record?.state).toBe('TERMINATED');
    expect(state.starts).toBe(0);
  });

  it('defect 5: a sweeper adoption answers for the transfer before the store says it owns it', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('adopt-1');
    await t.store.release(request.id, 1); // lease expired: a sweeper candidate
    const committed = gate();
    // The store committed the new owner; hold the reply.
    const store = holdOwnerClaims(t.store, committed, 'after-commit');
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ store, backplane, identity: identity('b'), execute });
    const swept = b.sweep();
    await committed.hit;
    const answer = await backplane.whoRuns('adopt-1', { timeoutMs: 50 });
    committed.open();
    await swept;
    expect(answer.status).toBe('owner');
    await eventually(() => state.running === 1);
    expect((await t.store.get('adopt-1'))?.ownerNodeId).toBe('b');
  });

  it('defect: a sweep pass claimed one page of expired transfers (16) — the rest of a dead owner’s transfers waited a sweep interval per page', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    // Forty transfers of an owner that is gone, every lease expired: more than a page of sweeper candidates.
    const ids = Array.from({ length: 40 }, (_, i) => `dead-${String(i).padStart(2, '0')}`);
    for (const id of ids) {
      await t.abandoned(id);
      await t.store.release(id, 1);
    }
    const { execute } = foreverExecutor();
    const b = t.coordinator({
      backplane,
      identity: identity('b'),
      execute,
      limits: { maxConcurrentTransfers: 20, queueSize: 100 },
    });
    // One pass (no timers: start() is not called), with room for all of them (a pass fills twice its slots).
    await b.sweep();
    const records = await Promise.all(ids.map((id) => t.store.get(id)));
    const claimed = records.filter((r) => r?.ownerNodeId === 'b' && r.epoch === 2).map((r) => r?.id);
    expect(claimed).toEqual(ids);
  });

  it('defect: the first node to sweep after an owner died queued all of its work while its peers stood idle', async () => {
    await using t = await setup();
    await using backplaneB = createSingleNodeBackplane({ nodeId: 'b' });
    await using backplaneC = createSingleNodeBackplane({ nodeId: 'c' });
    const ids = Array.from({ length: 30 }, (_, i) => `dead-${String(i).padStart(2, '0')}`);
    for (const id of ids) {
      await t.abandoned(id);
      await t.store.release(id, 1);
    }
    // Both nodes have queue places for all thirty; each runs 4 at a time.
    const limits = { maxConcurrentTransfers: 4, queueSize: 100 };
    const b = t.coordinator({
      backplane: backplaneB,
      identity: identity('b'),
      execute: foreverExecutor().execute,
      limits,
    });
    const c = t.coordinator({
      backplane: backplaneC,
      identity: identity('c'),
      execute: foreverExecutor().execute,
      limits,
    });
    await b.sweep();
    await c.sweep();
    const owners = (await Promise.all(ids.map((id) => t.store.get(id)))).map((r) => r?.ownerNodeId);
    // Each pass took its share (twice its slots), the rest is left for later passes.
    expect(owners.filter((o) => o === 'b')).toHaveLength(8);
    expect(owners.filter((o) => o === 'c')).toHaveLength(8);
    expect(owners.filter((o) => o === 'gone')).toHaveLength(14);
  });

  it('defect: expired candidates a sweep pass skips (transfers this node runs) hid the dead owner’s transfers behind them, pass after pass', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({
      backplane,
      identity: identity('b'),
      execute,
      limits: { maxConcurrentTransfers: 16, queueSize: 100 },
    });
    // Sixteen transfers b runs whose leases the store holds as expired (b froze, or its heartbeat is late): the
    // sweeper leaves them alone, they are b's.
    const own = Array.from({ length: 16 }, (_, i) => `a-own-${String(i).padStart(2, '0')}`);
    for (const id of own) {
      await b.submit(t.request(id));
      await t.store.release(id, 1);
    }
    await eventually(() => state.running === 16);
    // A dead owner's transfer in the same state, listed after them.
    await t.abandoned('z-dead');
    await t.store.transition('z-dead', 1, { to: 'IN_PROGRESS' });
    await t.store.release('z-dead', 1);
    for (let pass = 0; pass < 3; pass++) await b.sweep();
    expect(await t.store.get('z-dead')).toMatchObject({ ownerNodeId: 'b', epoch: 2 });
    // b's own transfers were left as they were: nobody took them over.
    const mine = await Promise.all(own.map((id) => t.store.get(id)));
    expect(mine.map((r) => r?.epoch)).toEqual(own.map(() => 1));
  });

  it('defect: a restarted node adopted one page (100) of its previous life’s transfers; the rest waited for their lease and the sweeper', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'a' });
    // 150 transfers the previous instance of node a owned, leases still fresh: more than a page of 100.
    const ids = Array.from({ length: 150 }, (_, i) => `prev-${String(i).padStart(3, '0')}`);
    for (const id of ids) await t.abandoned(id, identity('a', 'a-i1'));
    const { execute } = foreverExecutor();
    const a2 = t.coordinator({
      backplane,
      identity: identity('a', 'a-i2'),
      execute,
      limits: { maxConcurrentTransfers: 4, queueSize: 200 },
    });
    // One adoption (no timers: start() is not called), with room for all of them.
    await a2.adoptPreviousLife();
    const records = await Promise.all(ids.map((id) => t.store.get(id)));
    const adopted = records.filter((r) => r?.ownerInstance === 'a-i2' && r.epoch === 2).map((r) => r?.id);
    expect(adopted).toEqual(ids);
  });

  it('a restarted node adopts its previous life’s transfers only as far as its capacity allows; the rest stay for the sweeper', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'a' });
    const ids = Array.from({ length: 30 }, (_, i) => `prev-${String(i).padStart(2, '0')}`);
    for (const id of ids) await t.abandoned(id, identity('a', 'a-i1'));
    const a2 = t.coordinator({
      backplane,
      identity: identity('a', 'a-i2'),
      execute: foreverExecutor().execute,
      limits: { maxConcurrentTransfers: 4, queueSize: 8 },
    });
    await a2.adoptPreviousLife();
    const records = await Promise.all(ids.map((id) => t.store.get(id)));
    // Four running and eight waiting: twelve taken back, in list order; eighteen left as they were.
    expect(records.filter((r) => r?.ownerInstance === 'a-i2' && r.epoch === 2).map((r) => r?.id)).toEqual(
      ids.slice(0, 12),
    );
    expect(records.filter((r) => r?.ownerInstance === 'a-i1' && r.epoch === 1)).toHaveLength(18);
  });

  it('defect 8: an IN_PROGRESS transition whose reply was lost does not fail the transfer', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    let lost = 0;
    const store = wrapStore(t.store, 'transition', async (real, ...args) => {
      const [, , input] = args as Parameters<DataPlaneStore['transition']>;
      const result = await (real as DataPlaneStore['transition'])(
        ...(args as Parameters<DataPlaneStore['transition']>),
      );
      if (input.to === 'IN_PROGRESS' && lost++ === 0)
        throw new StoreUnavailableError('injected: the reply of a committed statement was lost');
      return result;
    });
    // A RECEIVED record (a new submit is created IN_PROGRESS; a record an older node left RECEIVED is adopted):
    // b takes it over on a resubmit and moves it to IN_PROGRESS itself.
    const request = await t.abandoned('lost-reply-1');
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ store, backplane, identity: identity('b'), execute });
    b.start();
    await b.submit(request);
    await eventually(() => state.running === 1);
    state.finish();
    await eventually(async () => (await t.store.get('lost-reply-1'))?.state === 'COMPLETED');
    expect(lost).toBeGreaterThan(0);
  });

  it('defect 8: shutdown waits for an adoption in flight and hands it back', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('shutdown-1');
    await t.store.release(request.id, 1);
    const held = gate();
    const store = holdOwnerClaims(t.store, held, 'before');
    const { state, execute } = foreverExecutor();
    const b = t.coordinator({ store, backplane, identity: identity('b'), execute });
    const swept = b.sweep();
    await held.hit;
    let shutDown = false;
    const shutdown = b.shutdown().then(() => {
      shutDown = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(shutDown).toBe(false);
    held.open();
    await Promise.all([swept, shutdown]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(state.running).toBe(0);
    const record = await t.store.get('shutdown-1');
    // Handed back: not left with a fresh lease that nothing here renews.
    expect(record?.leaseExpiresAt?.getTime() ?? 0).toBeLessThanOrEqual(Date.now());
  });

  it('defect 8: a restarted node id leaves the transfers of a still-live instance alone (rolling restart)', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'a' });
    const first = foreverExecutor();
    const a1 = t.coordinator({ backplane, identity: identity('a', 'a-i1'), execute: first.execute });
    a1.start();
    await a1.submit(t.request('rolling-1'));
    await eventually(() => first.state.running === 1);
    // The new instance has its own connection; asking the cluster reaches the old instance's responder.
    await using ownBackplane = createSingleNodeBackplane({ nodeId: 'a' });
    const cluster = new Proxy(ownBackplane, {
      get(target, prop, receiver) {
        if (prop === 'whoRuns' || prop === 'terminate') return Reflect.get(backplane, prop).bind(backplane);
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as Backplane;
    const second = foreverExecutor();
    const a2 = t.coordinator({
      backplane: cluster,
      identity: identity('a', 'a-i2'),
      execute: second.execute,
    });
    a2.start();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const record = await t.store.get('rolling-1');
    expect(record?.ownerInstance).toBe('a-i1');
    expect(record?.epoch).toBe(1);
    expect(first.state.running).toBe(1);
    expect(second.state.starts).toBe(0);
  });

  it('a retryable failure (NATS restarting under a JetStream sink) resumes the transfer instead of failing it', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const first = failsFirstRun();
    const b = t.coordinator({ backplane, identity: identity('b'), execute: first.execute });
    b.start();
    await b.submit(t.request('retry-1'));
    await eventually(async () => (await t.store.get('retry-1'))?.state === 'COMPLETED');
    const record = await t.store.get('retry-1');
    expect(first.runs()).toBe(2);
    expect(record?.attempts).toBe(2);
    expect(record?.result?.recordsWritten).toBe(3);
  });
  it('defect: takeovers used up the retry budget — a transfer taken over 20 times was recorded FAILED on its first retryable failure', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    const request = await t.abandoned('retry-after-takeovers');
    // Twenty owners in turn, each gone before it finished (as a cluster whose nodes kept being killed leaves
    // it): every owner change counts an attempt, none of them a failure of the transfer's own.
    for (let epoch = 1; epoch <= 20; epoch++)
      await t.store.takeOver(request.id, epoch, identity(`gone-${epoch}`), LIMITS.leaseMs);
    await t.store.release(request.id, 21);
    expect(await t.store.get(request.id)).toMatchObject({ epoch: 21, attempts: 21, retries: 0 });
    const first = failsFirstRun();
    const b = t.coordinator({ backplane, identity: identity('b'), execute: first.execute });
    b.start();
    await b.sweep();
    await eventually(async () => isTerminal((await t.store.get(request.id))?.state ?? 'RECEIVED'));
    const record = await t.store.get(request.id);
    expect(record?.error).toBeNull();
    expect(record).toMatchObject({ state: 'COMPLETED', retries: 1, result: { recordsWritten: 3 } });
    expect(first.runs()).toBe(2);
  });

  it(`a transfer that keeps failing retryably without progress is recorded FAILED after ${MAX_RETRIES} retries; progress (a saved checkpoint) starts the count again`, async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'b' });
    let runs = 0;
    const execute: TransferExecutor = async (_request, context) => {
      runs++;
      // The fifth run gets somewhere before the peer goes away again: its checkpoint resets the count.
      if (runs === 5) await context.checkpoint.save({ line: 5 });
      throw new SinkError('JetStream publish to x failed: timeout', { details: { retryable: true } });
    };
    const b = t.coordinator({ backplane, identity: identity('b'), execute });
    b.start();
    await b.submit(t.request('retry-budget'));
    await eventually(async () => (await t.store.get('retry-budget'))?.state === 'FAILED', 30_000);
    const record = await t.store.get('retry-budget');
    expect(record?.error?.code).toBe('SINK_FAILED');
    expect(record?.retries).toBe(MAX_RETRIES + 1);
    // Four runs before the checkpoint, the fifth saved it and failed (count 1), then MAX_RETRIES more.
    expect(runs).toBe(4 + MAX_RETRIES + 1);
    expect(record?.checkpoint).toEqual({ line: 5 });
  });

  it('defect: a queued transfer whose heartbeat came late was stopped and taken over by its own node — it keeps its epoch and is confirmed when it starts', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'q' });
    const beats = holdHeartbeats(t.store);
    let release = false;
    const starts: string[] = [];
    const execute: TransferExecutor = (request, context) =>
      new Promise((resolve, reject) => {
        starts.push(request.id);
        const done = () => resolve({ recordsRead: 1, recordsWritten: 1, badRecords: 0 });
        if (release) return done();
        const timer = setInterval(() => {
          if (!release) return;
          clearInterval(timer);
          done();
        }, 10);
        context.signal.addEventListener('abort', () => {
          clearInterval(timer);
          reject(context.signal.reason);
        });
      });
    await startOneAtATime(t, backplane, beats.store, execute, ['q-running', 'q-queued-1', 'q-queued-2']);
    await eventually(() => starts.includes('q-running'));
    await beats.hold();
    // Past the lease by this process's clock: the running transfer's watchdog stops it (it may have lost its
    // lease), while the queued ones, which have written nothing yet, wait to be confirmed.
    await new Promise((resolve) => setTimeout(resolve, HELD_BEAT_LEASE_MS * 2));
    beats.release();
    release = true;
    await eventually(async () => {
      const records = await Promise.all(
        ['q-running', 'q-queued-1', 'q-queued-2'].map((id) => t.store.get(id)),
      );
      return records.every((record) => record?.state === 'COMPLETED');
    });
    for (const id of ['q-queued-1', 'q-queued-2']) {
      const record = await t.store.get(id);
      expect(record).toMatchObject({ state: 'COMPLETED', epoch: 1, attempts: 1, ownerNodeId: 'q' });
    }
    // Each queued transfer ran once.
    expect(starts.filter((id) => id === 'q-queued-1')).toHaveLength(1);
    expect(starts.filter((id) => id === 'q-queued-2')).toHaveLength(1);
  });

  it('defect: a queued transfer started with its lease nearly spent was stopped by the watchdog as soon as it ran, and taken over by its own node', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'q' });
    const beats = holdHeartbeats(t.store);
    const finish = new Map<string, () => void>();
    const starts: string[] = [];
    const execute: TransferExecutor = (request, context) =>
      new Promise((resolve, reject) => {
        starts.push(request.id);
        finish.set(request.id, () => resolve({ recordsRead: 1, recordsWritten: 1, badRecords: 0 }));
        context.signal.addEventListener('abort', () => reject(context.signal.reason));
      });
    await startOneAtATime(t, backplane, beats.store, execute, ['q-first', 'q-next']);
    await eventually(() => starts.includes('q-first'));
    const heldAt = await beats.hold();
    // The last heartbeat that got through began at most one heartbeat interval (100 ms) before this one, so
    // q-next's lease ends between heldAt + 2.4 s and heldAt + 2.5 s. q-first finishes by itself 1.5 s in: q-next
    // leaves the queue with under half its lease left, which the held heartbeat cannot renew in time.
    await new Promise((resolve) => setTimeout(resolve, heldAt + 1_500 - performance.now()));
    finish.get('q-first')?.();
    await new Promise((resolve) =>
      setTimeout(resolve, heldAt + HELD_BEAT_LEASE_MS * 1.5 - performance.now()),
    );
    beats.release();
    await eventually(() => finish.has('q-next'));
    finish.get('q-next')?.();
    await eventually(async () => (await t.store.get('q-next'))?.state === 'COMPLETED');
    expect(await t.store.get('q-first')).toMatchObject({ state: 'COMPLETED', epoch: 1, attempts: 1 });
    // Started once, at its own epoch, after a heartbeat confirmed the lease: never stopped mid-run and resumed.
    expect(await t.store.get('q-next')).toMatchObject({
      state: 'COMPLETED',
      epoch: 1,
      attempts: 1,
      ownerNodeId: 'q',
    });
    expect(starts).toEqual(['q-first', 'q-next']);
  });

  it('a new-id submit is one store statement before its answer (it inserts first), and so is a resend of a finished transfer', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 's' });
    const calls: string[] = [];
    const counted = new Proxy(t.store, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          if (prop === 'get' || prop === 'submit') calls.push(String(prop));
          return value.apply(target, args);
        };
      },
    }) as DataPlaneStore;
    const execute: TransferExecutor = async () => ({ recordsRead: 1, recordsWritten: 1, badRecords: 0 });
    const s = t.coordinator({ store: counted, backplane, identity: identity('s'), execute });
    s.start();
    expect((await s.submit(t.request('one-1'))).outcome).toBe('created');
    expect(calls).toEqual(['submit']);
    await eventually(async () => (await t.store.get('one-1'))?.state === 'COMPLETED');
    calls.length = 0;
    // A resend to the node that saw it stored reads it; to a node that did not, the insert finds it.
    const again = await s.submit(t.request('one-1'));
    expect(again).toMatchObject({ outcome: 'stored', transfer: { id: 'one-1', state: 'COMPLETED' } });
    expect(calls).toEqual(['get']);
    calls.length = 0;
    const other = t.coordinator({ store: counted, backplane, identity: identity('o'), execute });
    const elsewhere = await other.submit(t.request('one-1'));
    expect(elsewhere).toMatchObject({ outcome: 'stored', transfer: { id: 'one-1', state: 'COMPLETED' } });
    expect(calls).toEqual(['submit']);
    // Another request under the same id is refused, and nothing of it is stored.
    const changed = parseTransferRequest({
      ...t.request('one-1'),
      mode: 'idempotent',
      options: { batchSize: 7 },
    });
    const error = await s.submit(changed).catch((err: unknown) => err);
    expect(SluiceError.hasCode(error, 'IDEMPOTENCY_CONFLICT')).toBe(true);
    expect((await t.store.get('one-1'))?.requestHash).toBe(requestHash(t.request('one-1')));
    expect(s.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it('a duplicate submit never costs a new id its queue place: QUEUE_FULL only for places taken by real work', async () => {
    await using t = await setup();
    await using backplane = createSingleNodeBackplane({ nodeId: 'p' });
    const held = gate();
    let holdNext = false;
    const store = wrapStore(t.store, 'submit', async (real, ...args) => {
      if (holdNext) {
        holdNext = false;
        held.reached();
        await held.opened;
      }
      return (real as DataPlaneStore['submit'])(...(args as Parameters<DataPlaneStore['submit']>));
    });
    // done-1 finished on another node: this one has not seen it, so its resend inserts first.
    await using seedBackplane = createSingleNodeBackplane({ nodeId: 'seed' });
    const seed = t.coordinator({
      backplane: seedBackplane,
      identity: identity('seed'),
      execute: async () => ({ recordsRead: 1, recordsWritten: 1, badRecords: 0 }),
    });
    seed.start();
    for (const id of ['done-1', 'done-2']) {
      expect((await seed.submit(t.request(id))).outcome).toBe('created');
      await eventually(async () => (await t.store.get(id))?.state === 'COMPLETED');
    }
    const { state, execute } = foreverExecutor();
    // One place in all: one running transfer, no queue.
    const p = t.coordinator({
      store,
      backplane,
      identity: identity('p'),
      execute,
      limits: { maxConcurrentTransfers: 1, queueSize: 0 },
    });
    p.start();
    // A duplicate's insert holds the only place while its statement is in flight …
    holdNext = true;
    const duplicate = p.submit(t.request('done-1'));
    await held.hit;
    // … and a new id arrives meanwhile: it waits for the duplicate's place instead of being refused.
    const fresh = p.submit(t.request('new-1'));
    await new Promise((resolve) => setTimeout(resolve, 50));
    held.open();
    expect(await duplicate).toMatchObject({ outcome: 'stored', transfer: { state: 'COMPLETED' } });
    expect((await fresh).outcome).toBe('created');
    await eventually(() => state.running === 1);
    // The place is now taken by real work: a new id is refused, a duplicate still gets its stored outcome.
    const refused = await p.submit(t.request('new-2')).catch((err: unknown) => err);
    expect(SluiceError.hasCode(refused, 'QUEUE_FULL')).toBe(true);
    expect(await t.store.get('new-2')).toBeFalsy();
    expect(await p.submit(t.request('done-1'))).toMatchObject({ outcome: 'stored' });
    // … also one this node never saw (no place for an insert: it reads first).
    expect(await p.submit(t.request('done-2'))).toMatchObject({ outcome: 'stored' });
    expect(await p.submit(t.request('new-1'))).toMatchObject({ outcome: 'running', confirmed: true });
  });
});
