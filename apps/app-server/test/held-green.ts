/**
 * The steering tests' common ground: an app-server whose one endpoint `items` follows a JSONL file (auto switch mode,
 * no bad record allowed, retired generations kept an hour), its first generation serving, and a rebuild held by a
 * bad record — a green waiting for promotion.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from '@sluice/testkit';
import { expect } from 'vitest';
import { call, localNode, type NodeSpec } from './helpers.js';

/** `n` JSONL lines `{id, value}` from id `from`. */
export const itemRows = (n: number, from = 1): string =>
  Array.from({ length: n }, (_, i) => `${JSON.stringify({ id: from + i, value: from + i })}\n`).join('');

/** Writes 20 rows to `<dir>/items.jsonl` and returns the spec of node `h1` serving them as endpoint `items`. */
export async function heldGreenNode(dir: string): Promise<{ spec: NodeSpec; source: string }> {
  const source = join(dir, 'items.jsonl');
  await writeFile(source, itemRows(20));
  const spec: NodeSpec = {
    ...localNode('h1', dir),
    extraYaml: [
      'cache: { gcGraceMs: 3600000 }',
      'endpoints:',
      '  - name: items',
      `    source: { type: file, path: "${source}", format: jsonl, follow: true }`,
      '    primaryKey: [id]',
      '    fields: { id: integer, value: number }',
      '    switch: { mode: auto, maxBadRecords: 0 }',
    ].join('\n'),
  };
  return { spec, source };
}

/** Endpoint `items` as the control API of the node at `url` lists it now. */
// biome-ignore lint/suspicious/noExplicitAny: the control API's JSON, asserted on field by field
export async function itemsEndpoint(url: string): Promise<any> {
  return (await call(`${url}/v1/endpoints`)).body.endpoints.find((e: { name: string }) => e.name === 'items');
}

/** Waits for the first generation to serve the 20 rows and returns its name (blue). */
export async function servingBlue(url: string): Promise<string> {
  const items = await waitFor(
    async () => {
      const e = await itemsEndpoint(url);
      return e?.records === 20 ? e : null;
    },
    { timeoutMs: 30_000, what: 'the first generation to serve' },
  );
  return items.servingCache as string;
}

/**
 * Appends a bad record (and rows 21–22) to `source`, asks for a rebuild and waits until it is held; returns the
 * endpoint as listed then (`held.cache` is the green, `held.reason` why).
 */
// biome-ignore lint/suspicious/noExplicitAny: the control API's JSON, asserted on field by field
export async function holdARebuild(url: string, source: string): Promise<any> {
  await appendFile(source, `{"id": "not a number"}\n${itemRows(2, 21)}`);
  expect((await call(`${url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
  return waitFor(
    async () => {
      const e = await itemsEndpoint(url);
      return e?.phase === 'held' ? e : null;
    },
    { timeoutMs: 30_000, what: 'the rebuild to be held' },
  );
}
