/**
 * Bodies sent to the control routes that steer generations, through a real app-server process: a route takes only
 * the body it documents, and a request carrying what it does not take changes nothing.
 */
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { heldGreenNode, holdARebuild, itemsEndpoint, servingBlue } from './held-green.js';
import { call, startNodeProcess } from './helpers.js';

describe('bodies of the steering routes', () => {
  it('defect: promote {"to": <generation>} promoted the held generation whatever "to" named, and rebuild took any body', async () => {
    await using dir = await tempDir('sluice-steering-bodies-');
    const { spec, source } = await heldGreenNode(dir.path);
    await using node = await startNodeProcess(spec);
    const items = () => itemsEndpoint(node.url);
    const blue = await servingBlue(node.url);
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
    const green = (await holdARebuild(node.url, source)).held.cache as string;

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
