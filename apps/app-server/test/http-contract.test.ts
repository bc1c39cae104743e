/**
 * The corners of the control API's HTTP contract (docs/http-api.md): every refusal names its place the way the rest of
 * the API does (`querystring.<name>`, `headers.<name>`), as an `application/problem+json` with a stable code.
 */
import { join } from 'node:path';
import { rawHttpExchange, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

/** Sends `request` as raw bytes and returns the whole answer as text (the server closes after it). */

describe('control API contract corners', { timeout: 90_000 }, () => {
  it('defect: an invalid transfer-list cursor was refused at path "cursor", every other query-string refusal at querystring.<name>', async () => {
    await using dir = await tempDir('sluice-control-contract-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    for (const cursor of [
      'zzz',
      Buffer.from('t1:../x').toString('base64url'),
      Buffer.from('x').toString('base64url'),
    ]) {
      const refused = await call(`${node.url}/v1/transfers?cursor=${encodeURIComponent(cursor)}`);
      expect(refused.status, cursor).toBe(400);
      expect(refused.headers.get('content-type'), cursor).toBe('application/problem+json; charset=utf-8');
      expect(refused.body, cursor).toMatchObject({ code: 'VALIDATION_FAILED', instance: '/v1/transfers' });
      expect(refused.body.errors, cursor).toEqual([
        { path: 'querystring.cursor', message: 'not a cursor of GET /v1/transfers (its "next")' },
      ]);
    }
    // A cursor the list gave is still taken.
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 2);
    for (const id of ['a', 'b']) {
      const created = await call(`${node.url}/v1/transfers`, {
        json: fileTransfer(id, source, join(dir.path, `${id}.jsonl`)),
      });
      expect(created.status).toBe(201);
      await waitForState(node.url, id, 'COMPLETED');
    }
    const first = await call(`${node.url}/v1/transfers?limit=1`);
    expect(first.body.records.map((r: { id: string }) => r.id)).toEqual(['a']);
    const second = await call(`${node.url}/v1/transfers?limit=1&cursor=${first.body.next}`);
    expect(second.status).toBe(200);
    expect(second.body.records.map((r: { id: string }) => r.id)).toEqual(['b']);
  });

  it('defect: a query parameter sent twice (limit=5&limit=6) was refused as "expected number, received NaN" — now "sent more than once" at querystring.<name>', async () => {
    await using dir = await tempDir('sluice-control-contract-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    for (const [path, name] of [
      ['/v1/transfers?limit=5&limit=6', 'limit'],
      ['/v1/transfers?limit=5&cursor=a&cursor=b', 'cursor'],
      ['/v1/transfers?state=FAILED&state=COMPLETED', 'state'],
    ] as const) {
      const refused = await call(`${node.url}${path}`);
      expect(refused.status, path).toBe(400);
      expect(refused.body, path).toMatchObject({ code: 'VALIDATION_FAILED', instance: '/v1/transfers' });
      expect(refused.body.errors, path).toEqual([
        { path: `querystring.${name}`, message: 'sent more than once' },
      ]);
    }
    // Once each, the same parameters are a list like any other.
    expect((await call(`${node.url}/v1/transfers?limit=5&state=FAILED`)).status).toBe(200);
  });

  it('defect: an HTTP/1.1 request without Host was answered 400 with an empty body by Node, not a problem', async () => {
    await using dir = await tempDir('sluice-control-contract-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    for (const path of ['/v1/transfers', '/healthz', '/nowhere']) {
      const answer = await rawHttpExchange(node.port, `GET ${path} HTTP/1.1\r\nconnection: close\r\n\r\n`);
      const [head, body] = answer.split('\r\n\r\n') as [string, string];
      expect(head.split('\r\n')[0], path).toBe('HTTP/1.1 400 Bad Request');
      expect(head.toLowerCase(), path).toContain('content-type: application/problem+json; charset=utf-8');
      expect(JSON.parse(body), path).toMatchObject({
        status: 400,
        code: 'VALIDATION_FAILED',
        errors: [{ path: 'headers.host', message: 'required in HTTP/1.1' }],
      });
    }
    const old = await rawHttpExchange(node.port, 'GET /healthz HTTP/1.0\r\n\r\n');
    expect(old.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
  });
});
