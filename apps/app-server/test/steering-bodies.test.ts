/**
 * Bodies sent to the control routes that steer generations, through a real app-server process: a route takes only
 * the body it documents, and a request carrying what it does not take changes nothing.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess } from './helpers.js';

const rows = (n: number, from = 1) =>
  Array.from({ length: n }, (_, i) => `${JSON.stringify({ id: from + i, value: from + i })}\n`).join('');

describe('bodies of the steering routes', () => {
  it('defect: promote {"to": <generation>} promoted the held generation whatever "to" named, and rebuild took any body', async () => {
    await using dir = await tempDir('sluice-steering-bodies-');
    const source = join(dir.path, 'items.jsonl');
    await writeFile(source, rows(20));
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        'cache: { gcGraceMs: 3600000 }',
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl, follow: true }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number }',
        '    switch: { mode: auto, maxBadRecords: 0 }',
      ].join('\n'),
    });
    const items = async () =>
      (await call(`${node.url}/v1/endpoints`)).body.endpoints.find(
        (e: { name: string }) => e.name === 'items',
      );
    const blue = (
      await waitFor(async () => ((await items())?.records === 20 ? await items() : null), {
        timeoutMs: 30_000,
        what: 'the first generation to serve',
      })
    ).servingCache as string;
    const generations = async () =>
      (await call(`${node.url}/v1/endpoints/items/generations`)).body.generations.map(
        (g: { name: string; state: string }) => [g.name, g.state],
      );

    // A rebuild takes no body: one that carries options is refused, and no generation is started.
    for (const body of [{ from: 'scratch' }, [1, 2], 'now']) {
      const reply = await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST', json: body });
      expect(reply.status, JSON.stringify(body)).toBe(400);
      expect(reply.body.code).toBe('VALIDATION_FAILED');
    }
    expect(await generations()).toEqual([[blue, 'serving']]);

    // A bad record holds the next rebuild.
    await appendFile(source, `{"id": "not a number"}\n${rows(2, 21)}`);
    expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = (
      await waitFor(async () => ((await items())?.phase === 'held' ? await items() : null), {
        timeoutMs: 30_000,
        what: 'the rebuild to be held',
      })
    ).held.cache as string;

    // Promote takes no `to` (rollback's key): naming one (here the serving one) is refused, and nothing moves.
    const named = await call(`${node.url}/v1/endpoints/items/promote`, {
      method: 'POST',
      json: { to: blue },
    });
    expect(named.status).toBe(400);
    expect(named.body.code).toBe('VALIDATION_FAILED');
    expect(named.body.errors).toEqual([{ path: 'to', message: expect.stringContaining('"to"') }]);
    expect(await generations()).toEqual([
      [green, 'held'],
      [blue, 'serving'],
    ]);
    expect((await items()).servingCache).toBe(blue);

    // It may name the generation it means (`generation`, what the console sends): another one is refused with the
    // one held now, and nothing moves; a name that is no generation name is a 400.
    const other = await call(`${node.url}/v1/endpoints/items/promote`, {
      method: 'POST',
      json: { generation: blue },
    });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({
      code: 'GENERATION_NOT_HELD',
      endpoint: 'items',
      generation: blue,
      held: green,
    });
    const garbage = await call(`${node.url}/v1/endpoints/items/promote`, {
      method: 'POST',
      json: { generation: '../x y' },
    });
    expect(garbage.status).toBe(400);
    expect(garbage.body.code).toBe('VALIDATION_FAILED');
    expect(await generations()).toEqual([
      [green, 'held'],
      [blue, 'serving'],
    ]);
    const promotedNamed = await call(`${node.url}/v1/endpoints/items/promote`, {
      method: 'POST',
      json: { generation: green },
    });
    expect(promotedNamed.status).toBe(200);
    expect(promotedNamed.body).toMatchObject({ from: blue, to: green, changed: true });

    // Without a body (or an empty one) each still does what it says.
    const promoted = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST', json: {} });
    expect(promoted.status).toBe(200);
    expect(promoted.body).toMatchObject({ from: blue, to: green, changed: false });
  }, 120_000);
});
