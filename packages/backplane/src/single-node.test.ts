import type { BackplaneStatus, SluiceEvent } from '@sluice/core';
import { aliasRedirected } from '@sluice/core';
import { capturingLogger, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { countingResponder } from '../test/helpers.js';
import { createSingleNodeBackplane } from './single-node.js';

describe('single-node backplane', () => {
  it('answers owner or nobody from the process itself', async () => {
    await using bp = createSingleNodeBackplane({ nodeId: 'solo' });
    const report = { nodeId: 'solo', address: 'http://solo', epoch: 2, progress: { read: 1 } };
    const registration = await bp.serve('t1', countingResponder(report));
    expect(await bp.whoRuns('t1', { timeoutMs: 10 })).toEqual({ status: 'owner', owner: report });
    expect(await bp.whoRuns('t2', { timeoutMs: 10 })).toEqual({ status: 'nobody' });
    await registration.close();
    expect(await bp.whoRuns('t1', { timeoutMs: 10 })).toEqual({ status: 'nobody' });
  });

  it('is reachable (nothing to lose) until closed', async () => {
    const bp = createSingleNodeBackplane({ nodeId: 'solo' });
    const since = performance.now();
    expect(bp.reachableSince(since)).toBe(true);
    await bp.close();
    expect(bp.reachableSince(since)).toBe(false);
  });

  it('terminates exactly once however many requests arrive', async () => {
    await using bp = createSingleNodeBackplane({ nodeId: 'solo' });
    const responder = countingResponder({ nodeId: 'solo', address: '', epoch: 1 }, { stopMs: 50 });
    await using _r = await bp.serve('t1', responder);
    const answers = await Promise.all([1, 2, 3].map(() => bp.terminate('t1', { timeoutMs: 1_000 })));
    expect(answers).toEqual(Array(3).fill({ status: 'terminated', by: 'solo' }));
    expect(responder.terminations).toBe(1);
    expect(await bp.terminate('t9', { timeoutMs: 1_000 })).toEqual({ status: 'not-running' });
  });

  it('a failing stop is reported unknown and may be retried', async () => {
    await using bp = createSingleNodeBackplane();
    let calls = 0;
    await using _r = await bp.serve('t1', {
      report: () => ({ nodeId: 'local', address: '', epoch: 1 }),
      async terminate() {
        calls += 1;
        if (calls === 1) throw new Error('disk busy');
      },
    });
    expect(await bp.terminate('t1', { timeoutMs: 100 })).toMatchObject({ status: 'unknown' });
    expect(await bp.terminate('t1', { timeoutMs: 100 })).toEqual({ status: 'terminated', by: 'local' });
    expect(calls).toBe(2);
  });

  it('an invalid report from a responder is unknown, not an owner', async () => {
    const logger = capturingLogger();
    await using bp = createSingleNodeBackplane({ logger });
    await using _r = await bp.serve('t1', {
      report: () => ({ nodeId: '', address: 'x', epoch: -1 }),
      async terminate() {},
    });
    expect((await bp.whoRuns('t1', { timeoutMs: 10 })).status).toBe('unknown');
    expect(logger.entries.some((e) => e.level === 'error')).toBe(true);
  });

  it('fans events out in order, survives a throwing handler, keeps the latest redirect', async () => {
    const logger = capturingLogger();
    await using bp = createSingleNodeBackplane({ logger });
    const seen: SluiceEvent[] = [];
    await using _bad = await bp.subscribe(() => {
      throw new Error('handler bug');
    });
    await using _good = await bp.subscribe(async (e) => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      seen.push(e);
    });
    const events = [1, 2, 3].map((v) =>
      aliasRedirected({ host: 'h1', alias: 'a', from: null, to: `a-${v}`, checkpoint: null, version: v }),
    );
    for (const e of events) await bp.publish(e);
    await waitFor(() => seen.length === 3, { what: 'three events' });
    expect(seen).toEqual(events);
    expect(await bp.latestAliasEvents()).toEqual([events[2]]);
    expect(logger.entries.filter((e) => e.level === 'error')).toHaveLength(3);
    await expect(bp.subscribe(() => {}, { types: ['Bogus' as never] })).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
  });

  it('reports status changes and refuses work after close', async () => {
    const bp = createSingleNodeBackplane();
    const statuses: BackplaneStatus[] = [];
    const off = bp.onStatus((s) => statuses.push(s));
    expect(bp.status()).toBe('connected');
    await bp.close();
    off();
    expect(statuses).toEqual(['closed']);
    expect((await bp.whoRuns('t', { timeoutMs: 10 })).status).toBe('unknown');
    await expect(
      bp.publish(aliasRedirected({ host: 'h1', alias: 'a', from: null, to: 'b', checkpoint: null })),
    ).rejects.toMatchObject({
      code: 'BACKPLANE_UNAVAILABLE',
    });
  });
});
