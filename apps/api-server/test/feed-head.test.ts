/**
 * HEAD on the change feed is a GET without a body (RFC 9110): the headers a GET would get — the event-stream
 * content type, or the same refusal — and the end of the response. A feed has no end, and a HEAD response never
 * carries the bytes that would send its headers, so it must not open one.
 */
import { request as httpRequest } from 'node:http';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startQuietApiServer, writeGeneration } from './helpers.js';

/** A HEAD request: its status and headers, or `no answer` when none came within 15 s (the connection is closed). */
function head(url: string): Promise<{ status: number; type: string | undefined } | 'no answer'> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'HEAD' }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'] }));
    });
    req.setTimeout(15_000, () => {
      req.destroy();
      resolve('no answer');
    });
    req.on('error', reject);
    req.end();
  });
}

describe('change feed: HEAD', () => {
  it('defect: HEAD on the change feed never answered (no headers) and held a feed subscription while it waited', async () => {
    await using dir = await tempDir('sluice-api-feed-head-');
    await writeGeneration(dir.path, 1, 20);
    await using server = await startQuietApiServer(dir.path);
    const feed = `${server.url}/v1/endpoints/items/changes`;
    expect(await head(feed)).toEqual({ status: 200, type: 'text/event-stream; charset=utf-8' });
    // Refusals are the GET's.
    expect(await head(`${feed}?filter=${encodeURIComponent('{"nope":1}')}`)).toMatchObject({ status: 400 });
    expect(await head(`${server.url}/v1/endpoints/none/changes`)).toMatchObject({ status: 404 });
    // No subscription was left behind.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/^sluice_api_change_subscribers 0$/m);
  }, 90_000);
});
