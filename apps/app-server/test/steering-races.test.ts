/**
 * Races an operator makes on the steering routes, through a real app-server process: the same promote or rollback
 * sent twice at once (two tabs, two curls) moves the alias once and records one switch; an app-server stopped
 * (SIGTERM, SIGKILL) while a green waits for promotion still holds it after the restart, and it can be promoted then.
 */
import { appendFile } from 'node:fs/promises';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { heldGreenNode, holdARebuild, itemRows, itemsEndpoint, servingBlue } from './held-green.js';
import { call, startNodeProcess } from './helpers.js';

describe('steering races', () => {
  it('two promotes and two rollbacks sent at once each move the alias once and record one switch', async () => {
    await using dir = await tempDir('sluice-steering-races-');
    const { spec, source } = await heldGreenNode(dir.path);
    await using node = await startNodeProcess(spec);
    const items = () => itemsEndpoint(node.url);
    const history = async () =>
      (await call(`${node.url}/v1/endpoints/items/generations`)).body.history.map(
        (h: { from: string | null; to: string; cause: string }) => [h.from, h.to, h.cause],
      );
    const blue = await servingBlue(node.url);

    // A bad record holds the rebuild.
    const green = (await holdARebuild(node.url, source)).held.cache as string;

    // Promote from two tabs at once: one switch.
    const promotes = await Promise.all(
      [0, 1].map(() => call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' })),
    );
    expect(promotes.map((r) => r.status)).toEqual([200, 200]);
    expect(promotes.map((r) => r.body.to)).toEqual([green, green]);
    expect(await history()).toEqual([
      [blue, green, 'promote'],
      [null, blue, 'restart'],
    ]);

    // Roll back from two tabs at once: one switch, back to blue, and blue keeps serving and following.
    const rollbacks = await Promise.all(
      [0, 1].map(() => call(`${node.url}/v1/endpoints/items/rollback`, { method: 'POST' })),
    );
    expect(
      rollbacks.map((r) => [r.status, r.body.code ?? r.body.to]),
      JSON.stringify(rollbacks.map((r) => r.body)),
    ).toEqual([
      [200, blue],
      [200, blue],
    ]);
    expect(await history()).toEqual([
      [green, blue, 'rollback'],
      [blue, green, 'promote'],
      [null, blue, 'restart'],
    ]);
    expect(rollbacks.filter((r) => r.body.changed === true)).toHaveLength(1);
    await appendFile(source, itemRows(3, 23));
    const after = await waitFor(
      async () => {
        const e = await items();
        return e?.servingCache === blue && e.records === 25 ? e : null;
      },
      { timeoutMs: 20_000, what: 'blue to serve again and follow its source' },
    );
    expect(after.phase).toBe('streaming');
  }, 90_000);

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`a green held when the app-server got ${signal} is still held after the restart, and can be promoted then`, async () => {
      await using dir = await tempDir('sluice-steering-restart-');
      const { spec, source } = await heldGreenNode(dir.path);
      let node = await startNodeProcess(spec);
      try {
        const items = () => itemsEndpoint(node.url);
        const generations = async () => {
          const body = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
          return {
            states: body.generations.map((g: { name: string; state: string }) => [g.name, g.state]),
            history: body.history.map((h: { from: string | null; to: string; cause: string }) => [
              h.from,
              h.to,
              h.cause,
            ]),
          };
        };
        const blue = await servingBlue(node.url);
        const held = await holdARebuild(node.url, source);
        const green = held.held.cache as string;
        const before = await generations();
        expect(before.states).toEqual([
          [green, 'held'],
          [blue, 'serving'],
        ]);

        await node.child.stop(signal);
        node = await startNodeProcess(spec);
        const after = await waitFor(
          async () => {
            const e = await items();
            return e?.phase === 'held' || e?.phase === 'streaming' ? e : null;
          },
          { timeoutMs: 30_000, what: 'the endpoint to start again' },
        );
        // Still waiting for promotion: the same green, the same reason, the alias unmoved.
        expect({ phase: after.phase, serving: after.servingCache, held: after.held }).toEqual({
          phase: 'held',
          serving: blue,
          held: { cache: green, reason: held.held.reason },
        });
        expect(await generations()).toEqual(before);
        // It keeps following its source, and a promote switches to it.
        await appendFile(source, itemRows(3, 23));
        await waitFor(
          async () =>
            (await call(`${node.url}/v1/endpoints/items/generations`)).body.generations[0].records === 25,
          { timeoutMs: 20_000, what: 'the held green to follow its source after the restart' },
        );
        const promoted = await call(`${node.url}/v1/endpoints/items/promote`, {
          method: 'POST',
          json: { generation: green },
        });
        expect(promoted.status, JSON.stringify(promoted.body)).toBe(200);
        expect(promoted.body).toMatchObject({ from: blue, to: green, changed: true });
        expect((await generations()).history).toEqual([
          [blue, green, 'promote'],
          [null, blue, 'restart'],
        ]);
        expect((await items()).records).toBe(25);
      } finally {
        await node.child.stop('SIGKILL');
      }
    }, 90_000);
  }
});
