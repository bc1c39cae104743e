/**
 * What the tests of the routes below fastify (fast-lookup.test.ts, fast-query.test.ts) share: a written cache of
 * `items` and `orders`, HS256 test tokens, a listening server's URL, a full api-server with auth, and the headers
 * two answers are compared by.
 */
import { createHmac } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolveConfig } from '@sluice/core';
import { signJwt, spawnTs } from '@sluice/testkit';
import { pino } from 'pino';
import { expect } from 'vitest';
import type { FastRoute } from '../src/fast-route.js';
import { startApiServer } from '../src/index.js';
import { WRITER } from './helpers.js';

export const SECRET = 'a-test-secret-of-32-characters!!';
/** The status the test servers answer with when a fast route left a request alone. */
export const LEFT_TO_FASTIFY = 599;

/** Writes 300 `items` and a few `orders` (composite key) under `root`, as an app-server would, in a child process. */
export async function writeItemsAndOrders(root: string): Promise<void> {
  const child = spawnTs(WRITER, ['--root', root, '--count', '300', '--orders']);
  await child.waitForLine(/^DONE$/, 60_000);
  expect((await child.exited).code).toBe(0);
}

/** An HS256 token with `claims`, signed with `secret`. */
export function sign(claims: Record<string, unknown>, secret = SECRET): string {
  return signJwt(secret, claims);
}

/** HS256 check of the tests' own tokens (the full server verifies with @fastify/jwt). */
export function verifyTestToken(token: string): unknown {
  const [head, payload, signature] = token.split('.');
  const expected = createHmac('sha256', SECRET).update(`${head}.${payload}`).digest('base64url');
  if (signature !== expected)
    throw Object.assign(new Error('bad signature'), { code: 'FAST_JWT_INVALID_SIGNATURE' });
  return JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8'));
}

/**
 * An http server that offers each request to `route` and answers what it leaves with {@link LEFT_TO_FASTIFY}: had
 * the route written anything (or read the body), writing that answer would throw or mix into the route's.
 */
export function standInServer(route: FastRoute): Server {
  return createServer((request, response) => {
    if (route(request, response)) return;
    response.writeHead(LEFT_TO_FASTIFY, { 'content-type': 'text/plain' });
    response.end('left');
  });
}

/** Listens on a free local port; the server's base URL. */
export async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A full api-server over the caches under `dataDir`, with auth (issuer `sluice-tests`, {@link SECRET}). */
export function startSecuredApiServer(dataDir: string) {
  const config = resolveConfig({
    dataDir,
    logLevel: 'silent',
    api: { auth: { jwtSecret: SECRET, issuer: 'sluice-tests' } },
  });
  return startApiServer({
    config,
    dataDir,
    port: 0,
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    watchMs: 50,
  });
}

/** An answer's headers without those of the connection (`date`, `connection`, `keep-alive`). */
export function answerHeaders(headers: Record<string, unknown>): Record<string, unknown> {
  const { date: _d, connection: _c, 'keep-alive': _k, ...rest } = headers;
  return rest;
}
