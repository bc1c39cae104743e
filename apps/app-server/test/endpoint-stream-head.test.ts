/**
 * HEAD on the endpoint stream is a GET without a body (RFC 9110): the headers a GET would get — the event-stream
 * content type, or the same refusal — and the end of the response. A stream has no end, and a HEAD response never
 * carries the bytes that would send its headers, so it must not open one.
 */
import { request as httpRequest } from 'node:http';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess, tokenAndKeptGenerationsYaml } from './helpers.js';

const TOKEN = 'stream-head-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

/** A HEAD request: its status and headers, or `no answer` when none came within 15 s (the connection is closed). */
function head(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; type: string | undefined; length: number } | 'no answer'> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'HEAD', headers }, (res) => {
      let length = 0;
      res.on('data', (chunk: Buffer) => {
        length += chunk.length;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], length }),
      );
    });
    req.setTimeout(15_000, () => {
      req.destroy();
      resolve('no answer');
    });
    req.on('error', reject);
    req.end();
  });
}

describe('endpoint stream: HEAD', () => {
  it('defect: HEAD on the endpoint stream never answered (no headers) and held a stream watcher while it waited', async () => {
    await using dir = await tempDir('sluice-app-stream-head-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: tokenAndKeptGenerationsYaml(TOKEN).join('\n'),
    });
    const stream = `${node.url}/v1/endpoints/stream`;
    expect(await head(stream, auth)).toEqual({
      status: 200,
      type: 'text/event-stream; charset=utf-8',
      length: 0,
    });
    // Refusals are the GET's.
    expect(await head(stream)).toMatchObject({ status: 401 });
    expect(await head(`${stream}?heartbeatMs=10`, auth)).toMatchObject({ status: 400 });
    // No watcher was left behind.
    const metrics = await (await fetch(`${node.url}/metrics`, { headers: auth })).text();
    expect(metrics).toMatch(/^sluice_endpoint_stream_watchers 0$/m);
    // A GET still streams: its watcher is counted while it is open.
    const controller = new AbortController();
    const open = await fetch(stream, { headers: auth, signal: controller.signal });
    expect(open.status).toBe(200);
    const reader = open.body!.getReader();
    await reader.read();
    const during = await (await fetch(`${node.url}/metrics`, { headers: auth })).text();
    expect(during).toMatch(/^sluice_endpoint_stream_watchers 1$/m);
    controller.abort();
    await reader.cancel().catch(() => undefined);
  }, 90_000);
});
