/**
 * An empty token is never read as "no token": it would send the request without credentials, and a server without
 * auth (or a route that needs none) would answer it as if the caller had meant that.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ClientErrorCode, createClient, SluiceClientError } from '../src/index.js';

/** A real HTTP server that records each request's `authorization` and answers like an api-server's list. */
async function recordingServer() {
  const seen: Array<IncomingHttpHeaders['authorization']> = [];
  const server = createServer((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ endpoints: [], records: [], next: null, count: 0 }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    seen,
    [Symbol.asyncDispose]: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}

/** What `fn` threw (or undefined when it did not). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('empty tokens', () => {
  it('defect: createClient({ token: "T", queryToken: "" }) sent query requests with no token at all — now refused at construction', async () => {
    await using server = await recordingServer();
    for (const [options, option] of [
      [{ token: 'T', queryToken: '' }, 'queryToken'],
      [{ token: 'T', controlToken: '' }, 'controlToken'],
      [{ token: '' }, 'token'],
    ] as const) {
      const err = thrown(() => {
        const client = createClient({ queryUrl: server.url, controlUrl: server.url, ...options });
        // Reached only without the fix: the request goes out.
        void client.endpoint('items').count();
      });
      expect(err, option).toBeInstanceOf(SluiceClientError);
      expect(err).toMatchObject({ code: ClientErrorCode.INVALID_TOKEN, status: 0 });
      expect((err as Error).message).toBe(
        `createClient: ${option} is an empty string, which would send requests with no token; give the token, or leave ${option} out`,
      );
    }
    // A fetch already under way would have reached the server by now; wait for one real request to be sure.
    await createClient({ queryUrl: server.url, token: 'T' }).endpoint('items').count();
    expect(server.seen).toEqual(['Bearer T']);
  });

  it('a token function that returns "" fails the call before anything is sent; undefined still sends none', async () => {
    await using server = await recordingServer();
    const client = createClient({ queryUrl: server.url, token: 'T', queryToken: async () => '' });
    const err = await client
      .endpoint('items')
      .query({ $limit: 1 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SluiceClientError);
    expect(err).toMatchObject({ code: ClientErrorCode.INVALID_TOKEN, status: 0 });
    expect((err as Error).message).toBe(
      'The token function returned an empty string, which would send the request with no token; return the token, or undefined to send none',
    );
    // The change feed ends with the same error rather than connecting without a token.
    const feed = await (async () => {
      for await (const _ of client.endpoint('items').changes()) {
        // nothing is expected
      }
    })().catch((e: unknown) => e);
    expect(feed).toMatchObject({ code: ClientErrorCode.INVALID_TOKEN });
    expect(server.seen).toEqual([]);
    // `undefined` is the documented "no token".
    await createClient({ queryUrl: server.url, token: () => undefined })
      .endpoint('items')
      .count();
    expect(server.seen).toEqual([undefined]);
  });
});
