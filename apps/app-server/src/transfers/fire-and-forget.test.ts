import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createSingleNodeBackplane } from '@sluice/backplane';
import {
  parseTransferRequest,
  SinkError,
  systemClock,
  type TransferRequest,
  type TransferResult,
} from '@sluice/core';
import { openStore } from '@sluice/store';
import { capturingLogger, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../metrics.js';
import { RequestPolicy } from './confinement.js';
import type { CoordinatorOptions } from './context.js';
import { FireAndForget } from './fire-and-forget.js';
import { FireAndForgetJournal } from './fire-and-forget-journal.js';

/**
 * The fire-and-forget journal's sweep on a real directory: which runs' leftovers it removes (those of runs that no
 * longer run) and which it never touches (a run of this process still going). The end-to-end case — an app-server
 * SIGKILLed mid-run, restarted beside a live node sharing the destination — is test/fire-and-forget-leftovers.test.ts.
 */

const IDENTITY = { nodeId: 'n1', address: 'http://n1.invalid', instanceId: 'n1-now' };
const DEAD_WRITER = 'fire-and-forget.0b7e2a52-8d43-4a4e-9a55-2f7f0f3c1c11';

async function setup(options: { discardFails?: () => boolean } = {}) {
  const dir = await tempDir('sluice-ff-journal-');
  const store = await openStore(`sqlite:${join(dir.path, 'store.db')}`);
  const root = join(dir.path, 'root');
  const policy = new RequestPolicy({ roots: [root], connections: {}, endpoints: [], cwd: root });
  const journalDir = join(dir.path, 'journal');
  const logger = capturingLogger();
  const discarded: Array<{ id: string; writer: string | undefined; destination: unknown }> = [];
  const finishers: Array<() => void> = [];
  const execute: CoordinatorOptions['execute'] = () =>
    new Promise<TransferResult>((resolve) => {
      finishers.push(() => resolve({ recordsRead: 0, recordsWritten: 0, badRecords: 0 }));
    });
  const fireAndForget = new FireAndForget({
    store,
    backplane: createSingleNodeBackplane({ nodeId: 'n1' }),
    identity: IDENTITY,
    limits: {
      leaseMs: 600,
      heartbeatMs: 100,
      ownerWaitMs: 100,
      sweepIntervalMs: 60_000,
      maxConcurrentTransfers: 4,
      queueSize: 8,
      fireAndForgetConcurrency: 2,
      shutdownGraceMs: 2_000,
    },
    policy,
    execute,
    discard: async (request, writer) => {
      if (options.discardFails?.())
        throw new SinkError('destination unreachable', { details: { retryable: true } });
      discarded.push({ id: request.id, writer, destination: request.destination });
    },
    fireAndForgetJournal: journalDir,
    metrics: createMetrics({
      transfers: () => ({ running: 0, queued: 0, fireAndForget: 0 }),
      pipelines: () => [],
    }),
    logger,
    clock: systemClock,
  });
  const request = (id: string, destination = join(root, `${id}.out.jsonl`)): TransferRequest =>
    parseTransferRequest({
      id,
      mode: 'fire-and-forget',
      source: { type: 'file', path: join(root, `${id}.in.jsonl`), format: 'jsonl' },
      destination: { type: 'file', path: destination, format: 'jsonl' },
    });
  const journal = new FireAndForgetJournal(journalDir);
  const entries = async () => (await readdir(journalDir).catch(() => [] as string[])).sort();
  const dispose = async () => {
    await store[Symbol.asyncDispose]();
    await dir[Symbol.asyncDispose]();
  };
  /** Journals a run of an earlier process of this node (what a sweep removes). */
  const recordDead = (request: TransferRequest) =>
    journal.record({
      writer: DEAD_WRITER,
      nodeId: 'n1',
      instanceId: 'n1-before',
      startedAt: new Date().toISOString(),
      request,
    });
  return {
    fireAndForget,
    journal,
    request,
    recordDead,
    discarded,
    finishers,
    entries,
    logger,
    root,
    dispose,
  };
}

describe('the fire-and-forget journal', () => {
  it('removes what a run of a previous process left and forgets it; never touches a run of this process still going', async () => {
    const t = await setup();
    try {
      await t.recordDead(t.request('dead'));
      t.fireAndForget.submit(t.request('running'), IDENTITY);
      await waitFor(async () => (await t.entries()).length === 2, {
        what: 'the running run to be journaled',
      });
      const running = (await t.entries()).find((name) => name !== `${DEAD_WRITER}.json`)!;

      await t.fireAndForget.sweepLeftovers();
      expect(t.discarded).toEqual([
        {
          id: 'dead',
          writer: DEAD_WRITER,
          destination: { type: 'file', path: join(t.root, 'dead.out.jsonl'), format: 'jsonl' },
        },
      ]);
      expect(await t.entries()).toEqual([running]);
      expect(t.logger.at('info').map((e) => e.msg)).toContain(
        'removed what a fire-and-forget run of a previous life left',
      );

      // The running run ends: it removes its own leftovers and its entry.
      t.finishers[0]!();
      await waitFor(async () => (await t.entries()).length === 0, {
        what: 'the ended run to forget its entry',
      });
      expect(t.discarded.map((d) => d.writer)).toEqual([DEAD_WRITER, running.slice(0, -'.json'.length)]);
    } finally {
      await t.dispose();
    }
  });

  it('keeps an entry whose destination cannot be reached now for the next sweep', async () => {
    let down = true;
    const t = await setup({ discardFails: () => down });
    try {
      await t.recordDead(t.request('dead'));
      await t.fireAndForget.sweepLeftovers();
      expect(await t.entries()).toEqual([`${DEAD_WRITER}.json`]);
      expect(t.logger.warnings().map((e) => e.msg)).toContain(
        'could not remove what a fire-and-forget run left; will try again',
      );
      down = false;
      await t.fireAndForget.sweepLeftovers();
      expect(await t.entries()).toEqual([]);
      expect(t.discarded.map((d) => d.writer)).toEqual([DEAD_WRITER]);
    } finally {
      await t.dispose();
    }
  });

  it('forgets, with a warning, an entry outside the roots of today and one cut short by a crash', async () => {
    const t = await setup();
    try {
      await t.recordDead(t.request('moved', '/elsewhere/moved.out.jsonl'));
      const cutShort = 'fire-and-forget.5d1f0a54-3c8e-4f55-8f0b-6a9b1e2d3c4f';
      await writeFile(join(t.journal.directory, `${cutShort}.json`), '{"writer":"fire-and-fo');
      // Not a journal file: left alone.
      await writeFile(join(t.journal.directory, 'notes.txt'), 'an operator was here');
      await t.fireAndForget.sweepLeftovers();
      expect(t.discarded).toEqual([]);
      expect(await t.entries()).toEqual(['notes.txt']);
      expect(t.logger.warnings().map((e) => e.msg)).toEqual(
        expect.arrayContaining([
          'cannot remove what a fire-and-forget run left: this node may no longer reach its destination (remove it by hand)',
          'dropped an unreadable fire-and-forget journal entry',
        ]),
      );
    } finally {
      await t.dispose();
    }
  });
});
