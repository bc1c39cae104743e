/**
 * The control API's JWTs: a time claim that is no usable NumericDate (an `exp` of 1e309, which JSON parses to
 * Infinity, or one past any date) is a malformed token — 401 naming the claim — on a request and on the endpoint
 * stream, never a grant that does not expire. A real app-server process.
 */
import { request as httpRequest } from 'node:http';
import { signJwtPayload, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';

const SECRET = 'control-claims-secret-0123456789abcdef';

/** GETs `url` and resolves with the status and, unless it is an event stream (then closed at its head), the body. */
function statusOf(url: string, authorization: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: { authorization } }, (res) => {
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        res.destroy();
        resolve({ status: res.statusCode ?? 0, body: '' });
        return;
      }
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('control API token time claims', () => {
  it('defect: a control token whose exp is 1e309 (Infinity) was accepted as never expiring — on requests and the endpoint stream', async () => {
    await using dir = await tempDir('sluice-app-token-claims-');
    await using node = await startNodeProcess({
      ...localNode('claims', dir.path),
      extraYaml: `control: { auth: { jwtSecret: "${SECRET}" } }`,
    });
    const answers = async (payload: string) => {
      const authorization = `Bearer ${signJwtPayload(SECRET, payload)}`;
      return {
        transfers: await statusOf(`${node.url}/v1/transfers`, authorization),
        stream: await statusOf(`${node.url}/v1/endpoints/stream`, authorization),
      };
    };
    const soon = Math.floor(Date.now() / 1000) + 600;
    for (const [payload, claim] of [
      ['{"sub":"ops","exp":1e309}', 'exp'],
      ['{"sub":"ops","exp":1e300}', 'exp'],
      [`{"sub":"ops","exp":${soon},"iat":"yesterday"}`, 'iat'],
    ] as const) {
      for (const [route, answer] of Object.entries(await answers(payload))) {
        expect(answer.status, `${route} ${payload}: ${answer.body}`).toBe(401);
        expect(JSON.parse(answer.body), `${route} ${payload}`).toMatchObject({
          code: 'UNAUTHORIZED',
          detail: expect.stringContaining(`claim "${claim}" is invalid`),
        });
      }
    }
    // A fractional exp is a NumericDate like any other (RFC 7519 § 2).
    for (const [route, answer] of Object.entries(await answers(`{"sub":"ops","exp":${soon}.5}`)))
      expect(answer.status, `${route}: ${answer.body}`).toBe(200);
  }, 90_000);
});
