/**
 * Generations an operator steers, through a real app-server process: the generation list and the alias history
 * (durable across a restart), a gated rebuild held with its reason, promote, rollback, a refused rollback that
 * changes nothing, and the routes behind control auth like the rest of the API.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  localNode,
  moved,
  type NodeProcess,
  observeEvents,
  startNodeProcess,
  tokenAndKeptGenerationsYaml,
} from './helpers.js';

const TOKEN = 'steering-test-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

const rows = (n: number, from = 1) =>
  Array.from(
    { length: n },
    (_, i) => `${JSON.stringify({ id: from + i, value: from + i, category: 'a' })}\n`,
  ).join('');

describe('steered generations on an app-server', () => {
  it('lists generations and history, holds a gated rebuild, promotes, rolls back, refuses a rollback that cannot resume', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-steering-');
    const source = join(dir.path, 'items.jsonl');
    await writeFile(source, rows(100));
    await using observer = await observeEvents(nats.url);
    const events = observer.events;
    const moves = () =>
      events.flatMap((e) =>
        e.type === 'AliasRedirected' ? [{ from: e.from, to: e.to, cause: e.cause }] : [],
      );
    const spec = {
      ...localNode('h1', dir.path),
      nats: nats.url,
      extraYaml: [
        ...tokenAndKeptGenerationsYaml(TOKEN),
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl, follow: true }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number, category: string }',
        '    switch: { mode: auto, minRecordRatio: 0.9, maxBadRecords: 0 }',
      ].join('\n'),
    };
    const api = (node: NodeProcess, path: string, init: Parameters<typeof call>[1] = {}) =>
      call(`${node.url}${path}`, { ...init, headers: { ...auth, ...init.headers } });
    const itemsOf = async (node: NodeProcess) =>
      (await api(node, '/v1/endpoints')).body.endpoints.find((e: { name: string }) => e.name === 'items');
    const generationsOf = async (node: NodeProcess) => {
      const reply = await api(node, '/v1/endpoints/items/generations');
      expect(reply.status).toBe(200);
      return reply.body;
    };

    let node = await startNodeProcess(spec);
    try {
      const blue = (
        await waitFor(
          async () => {
            const items = await itemsOf(node);
            return items?.servingCache && items.records === 100 ? items : null;
          },
          { timeoutMs: 20_000, what: 'the first generation to serve' },
        )
      ).servingCache as string;

      // Authorized like the rest of the control API.
      for (const [method, path] of [
        ['GET', '/v1/endpoints/items/generations'],
        ['POST', '/v1/endpoints/items/promote'],
        ['POST', '/v1/endpoints/items/rollback'],
      ] as const) {
        const open = await call(`${node.url}${path}`, { method });
        expect(open.status).toBe(401);
        expect(open.body.code).toBe('UNAUTHORIZED');
      }
      expect((await api(node, '/v1/endpoints/nope/generations')).body.code).toBe('UNKNOWN_ENDPOINT');
      const nothing = await api(node, '/v1/endpoints/items/promote', { method: 'POST' });
      expect(nothing.status).toBe(409);
      expect(nothing.body.code).toBe('NOTHING_TO_PROMOTE');
      const noRollback = await api(node, '/v1/endpoints/items/rollback', { method: 'POST' });
      expect(noRollback.status).toBe(409);
      expect(noRollback.body.code).toBe('NOTHING_TO_ROLL_BACK');

      let listed = await generationsOf(node);
      expect(listed.generations).toEqual([
        {
          name: blue,
          state: 'serving',
          createdAt: expect.any(String),
          snapshotDoneAt: expect.any(String),
          switchedAt: expect.any(String),
          retiredAt: null,
          records: 100,
          checkpoint: expect.objectContaining({ dag: expect.any(String) }),
          decision: 'from-scratch',
          reason: expect.stringContaining('no cache yet'),
          cause: 'restart',
        },
      ]);
      expect(listed.history).toEqual([
        {
          alias: 'items',
          from: null,
          to: blue,
          at: listed.generations[0].switchedAt,
          cause: 'restart',
          version: 1,
        },
      ]);

      // The source grows by a bad record: the rebuild breaks maxBadRecords, is held, the alias stays, the endpoint
      // says why (the file only grew, so blue can still resume from its checkpoint later).
      await appendFile(source, `{"id": "not a number"}\n${rows(5, 101)}`);
      expect((await api(node, '/v1/endpoints/items/rebuild', { method: 'POST' })).status).toBe(202);
      const held = await waitFor(
        async () => {
          const items = await itemsOf(node);
          return items.phase === 'held' ? items : null;
        },
        { timeoutMs: 20_000, what: 'the short rebuild to be held' },
      );
      expect(held.held.reason).toBe('1 bad records, more than the 0 allowed');
      expect(held.servingCache).toBe(blue);
      const green = held.held.cache as string;
      listed = await generationsOf(node);
      expect(listed.generations.map((g: { name: string; state: string }) => [g.name, g.state])).toEqual([
        [green, 'held'],
        [blue, 'serving'],
      ]);
      expect(listed.generations[0]).toMatchObject({
        records: 105,
        switchedAt: null,
        reason: held.held.reason,
        cause: 'rebuild',
        snapshotDoneAt: expect.any(String),
      });
      // Held, it keeps following its source.
      await appendFile(source, rows(5, 106));
      await waitFor(async () => (await generationsOf(node)).generations[0].records === 110, {
        timeoutMs: 10_000,
        what: 'the held generation to follow its source',
      });

      const promoted = await api(node, '/v1/endpoints/items/promote', { method: 'POST' });
      expect(promoted.status).toBe(200);
      expect(promoted.body).toEqual(moved('promote', blue, green));
      const again = await api(node, '/v1/endpoints/items/promote', { method: 'POST' });
      expect(again.body).toMatchObject({ to: green, changed: false });
      expect((await itemsOf(node)).servingCache).toBe(green);

      // Roll back: the source's beginning is unchanged since blue's checkpoint, so blue continues from it.
      const rolled = await api(node, '/v1/endpoints/items/rollback', { method: 'POST' });
      expect(rolled.status).toBe(200);
      expect(rolled.body).toEqual(moved('rollback', green, blue));
      expect(
        (await api(node, '/v1/endpoints/items/rollback', { method: 'POST', json: {} })).body,
      ).toMatchObject({
        to: blue,
        changed: false,
      });
      const bad = await api(node, '/v1/endpoints/items/rollback', {
        method: 'POST',
        json: { to: 'x', extra: 1 },
      });
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe('VALIDATION_FAILED');
      const afterRollback = await waitFor(
        async () => {
          const items = await itemsOf(node);
          return items.servingCache === blue && items.decision.decision === 'resume' && items.records === 110
            ? items
            : null;
        },
        { timeoutMs: 10_000, what: 'blue to serve again, resumed, caught up' },
      );
      expect(afterRollback.phase).not.toBe('held');
      await waitFor(() => moves().some((m) => m.cause === 'rollback' && m.from === green && m.to === blue), {
        what: 'AliasRedirected of the rollback',
      });

      // The history is durable: a restart reopens blue in place and lists every switch.
      expect((await node.child.stop('SIGTERM')).code).toBe(0);
      node = await startNodeProcess(spec);
      const reopened = await waitFor(
        async () => ((await itemsOf(node))?.servingCache ? itemsOf(node) : null),
        {
          timeoutMs: 20_000,
          what: 'the endpoint after a restart',
        },
      );
      expect(reopened.servingCache).toBe(blue);
      listed = await generationsOf(node);
      expect(
        listed.history.map((h: { from: string | null; to: string; cause: string }) => [
          h.from,
          h.to,
          h.cause,
        ]),
      ).toEqual([
        [green, blue, 'rollback'],
        [blue, green, 'promote'],
        [null, blue, 'restart'],
      ]);
      expect(listed.generations.map((g: { name: string; state: string }) => [g.name, g.state])).toEqual([
        [green, 'retired'],
        [blue, 'serving'],
      ]);

      // The file is rewritten: rebuild (it passes the gate), then a rollback to blue cannot resume → refused.
      await writeFile(source, rows(100, 1001));
      await api(node, '/v1/endpoints/items/rebuild', { method: 'POST' });
      const third = (
        await waitFor(
          async () => {
            const items = await itemsOf(node);
            return items.servingCache !== blue && items.records === 100 ? items : null;
          },
          { timeoutMs: 20_000, what: 'the rewritten rebuild to switch' },
        )
      ).servingCache as string;
      const before = await generationsOf(node);
      const refused = await api(node, '/v1/endpoints/items/rollback', { method: 'POST' });
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ code: 'CANNOT_RESUME', status: 409 });
      expect(refused.body.detail).toContain(blue);
      const after = await generationsOf(node);
      expect(after.history).toEqual(before.history);
      expect(after.generations.map((g: { state: string }) => g.state)).toEqual(
        before.generations.map((g: { state: string }) => g.state),
      );
      expect((await itemsOf(node)).servingCache).toBe(third);
      expect(moves().map((m) => m.cause)).toEqual(['restart', 'promote', 'rollback', 'rebuild']);
      expect(new Set(events.flatMap((e) => (e.type === 'AliasRedirected' ? [e.host] : [])))).toEqual(
        new Set(['h1']),
      );
    } finally {
      await node.child.stop('SIGKILL');
    }
  }, 120_000);
});
