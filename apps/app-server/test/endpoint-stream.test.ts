/**
 * `GET /v1/endpoints/stream` on a real app-server process: authorized like the rest of the control API, the
 * picture on connect, progress of a rebuild (a building generation) and its switch pushed as they happen, a
 * rollback's switch, heartbeats, and every stream ended (exit 0) by a graceful shutdown.
 */
import { join } from 'node:path';
import { readEventStream, type SseMessage } from '@sluice/client';
import type { EndpointWatchView } from '@sluice/core';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess, tokenAndKeptGenerationsYaml, writeRecords } from './helpers.js';

const TOKEN = 'stream-test-token-0123456789';
/**
 * Records of the endpoint: enough that a rebuild lasts seconds on a fast machine, so the stream (sampled every
 * 500 ms) shows it building — 20 000 were sometimes rebuilt between two samples.
 */
const RECORDS = 200_000;
const auth = { authorization: `Bearer ${TOKEN}` };

/** Reads a stream in the background, keeping every event (data parsed) until it ends or is aborted. */
function watch(url: string) {
  const controller = new AbortController();
  const events: Array<{ event: string; data: Record<string, unknown> }> = [];
  const opened = fetch(url, { headers: auth, signal: controller.signal });
  const ended = (async () => {
    const response = await opened;
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    try {
      for await (const message of readEventStream(response.body!) as AsyncGenerator<SseMessage>)
        events.push({ event: message.event, data: JSON.parse(message.data) });
    } catch (err) {
      if (!controller.signal.aborted) throw err;
    }
  })();
  ended.catch(() => undefined);
  const pictures = () =>
    events.flatMap((e) =>
      e.event === 'endpoints'
        ? [(e.data.endpoints as EndpointWatchView[]).find((x) => x.name === 'items')!]
        : [],
    );
  return { events, pictures, ended, close: () => controller.abort() };
}

describe('the endpoint stream of an app-server', () => {
  it('pushes the picture, a rebuild in progress and its switch, a rollback; heartbeats; ends on shutdown', async () => {
    await using dir = await tempDir('sluice-app-stream-');
    const source = await writeRecords(join(dir.path, 'items.jsonl'), RECORDS);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        ...tokenAndKeptGenerationsYaml(TOKEN),
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number, category: string }',
      ].join('\n'),
    });
    const streamUrl = `${node.url}/v1/endpoints/stream`;

    // Authorized like the rest of the control API; bad parameters are a 400 with the path.
    const open = await call(streamUrl);
    expect(open.status).toBe(401);
    expect(open.body.code).toBe('UNAUTHORIZED');
    const bad = await call(`${streamUrl}?heartbeatMs=10`, { headers: auth });
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe('VALIDATION_FAILED');

    const blue = (
      await waitFor(
        async () => {
          const items = (await call(`${node.url}/v1/endpoints`, { headers: auth })).body.endpoints[0];
          return items?.servingCache && items.records === RECORDS && !items.buildingCache ? items : null;
        },
        { timeoutMs: 60_000, what: 'the first generation to serve' },
      )
    ).servingCache as string;

    const stream = watch(streamUrl);
    // On connect: the whole picture, generations and history included.
    const first = await waitFor(() => stream.pictures()[0], { what: 'the first picture' });
    expect(first).toMatchObject({ name: 'items', servingCache: blue, records: RECORDS, building: null });
    expect(first.generations.map((g) => [g.name, g.state])).toEqual([[blue, 'serving']]);
    expect(first.history.map((h) => [h.from, h.to, h.cause])).toEqual([[null, blue, 'restart']]);

    // A rebuild: its progress while it builds, then the switch, then the new picture — pushed, not polled.
    expect(
      (await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST', headers: auth })).status,
    ).toBe(202);
    const switched = await waitFor(
      () => stream.events.find((e) => e.event === 'switch' && e.data.cause === 'rebuild'),
      { timeoutMs: 60_000, what: 'the switch of the rebuild' },
    );
    const green = switched.data.to as string;
    expect(switched.data).toMatchObject({ endpoint: 'items', from: blue, to: green, at: expect.any(String) });
    const building = stream.pictures().filter((p) => p.building !== null);
    expect(building.length).toBeGreaterThan(0);
    expect(building[0]!.building).toMatchObject({ cache: green, expected: RECORDS });
    expect(building[0]!.generations.find((g) => g.name === green)?.state).toBe('building');
    const ratios = building.map((p) => p.building!.ratio!);
    expect(ratios).toEqual([...ratios].sort((a, b) => a - b));
    await waitFor(
      () => stream.pictures().find((p) => p.servingCache === green && p.history[0]?.cause === 'rebuild'),
      { what: 'the picture after the switch' },
    );

    // A rollback is pushed the same way.
    const rolled = await call(`${node.url}/v1/endpoints/items/rollback`, { method: 'POST', headers: auth });
    expect(rolled.status).toBe(200);
    const back = await waitFor(
      () => stream.events.find((e) => e.event === 'switch' && e.data.cause === 'rollback'),
      { what: 'the switch of the rollback' },
    );
    expect(back.data).toMatchObject({ from: green, to: blue });
    await waitFor(
      () => stream.pictures().find((p) => p.servingCache === blue && p.history[0]?.cause === 'rollback'),
      { what: 'the picture after the rollback' },
    );

    // Heartbeats at the interval the request asks for (comments: an SSE parser skips them).
    const raw = await fetch(`${streamUrl}?heartbeatMs=1000`, { headers: auth });
    const reader = raw.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const started = Date.now();
    while (!text.includes(': heartbeat')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    expect(text).toContain(': heartbeat');
    expect(Date.now() - started).toBeLessThan(5_000);
    await reader.cancel();

    // A graceful stop ends every open stream and exits 0.
    const stopped = await node.child.stop('SIGTERM');
    expect(stopped.code).toBe(0);
    await stream.ended;
  }, 120_000);
});
