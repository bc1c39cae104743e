/**
 * One client must not take every endpoint-stream slot of an app-server: past `control.maxStreamsPerClient` streams
 * of its own it is refused (429 QUEUE_FULL naming that bound, `retry-after`) while other clients still get theirs,
 * up to `control.maxStreams` for the process. A client is its bearer token's subject with `control.auth` (a renewed
 * token is the same client; a listed token is itself), its remote address without; a closed stream frees its slot.
 */
import { type ClientRequest, request as httpRequest, type IncomingMessage } from 'node:http';
import { signJwt, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';

const GREEDY_TOKEN = 'stream-greedy-token-0123456789';
const PATIENT_TOKEN = 'stream-patient-token-0123456789';
const SECRET = 'stream-client-limit-secret-0123456789';

/** A stream that opened, or the refusal: its status, problem body and `retry-after`. */
type Outcome =
  | { status: 200; stream: OpenStream }
  | { status: number; problem: Record<string, unknown>; retryAfter: string | undefined };

interface OpenStream {
  close(): void;
}

/** Opens `GET /v1/endpoints/stream` on its own connection (node:http: nothing shared with the server's code). */
function openStream(
  base: string,
  headers: Record<string, string> = {},
  options: { localAddress?: string } = {},
): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const req: ClientRequest = httpRequest(
      `${base}/v1/endpoints/stream`,
      { headers: { accept: 'text/event-stream', ...headers }, agent: false, ...options },
      (res: IncomingMessage) => {
        res.setEncoding('utf8');
        if (res.statusCode === 200) {
          res.resume();
          resolve({
            status: 200,
            stream: {
              close: () => {
                req.destroy();
                res.destroy();
              },
            },
          });
          return;
        }
        let body = '';
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            problem: JSON.parse(body || '{}'),
            retryAfter: res.headers['retry-after'],
          }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const jwt = (claims: Record<string, unknown>) => bearer(signJwt(SECRET, claims));

const refusal = (outcome: Outcome) =>
  'stream' in outcome
    ? { status: outcome.status }
    : {
        status: outcome.status,
        code: outcome.problem.code,
        limit: outcome.problem.limit,
        max: outcome.problem.max,
        retryAfter: outcome.retryAfter,
      };

const streamOf = (outcome: Outcome): OpenStream => {
  if (!('stream' in outcome)) throw new Error(`expected an open stream, got HTTP ${outcome.status}`);
  return outcome.stream;
};

describe('endpoint streams per client (control.maxStreamsPerClient)', () => {
  it('defect: one token opening endpoint streams in a loop took all 256 slots and a token that had opened none was refused', async () => {
    await using dir = await tempDir('sluice-app-stream-limit-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: `control: { auth: { tokens: ["${GREEDY_TOKEN}", "${PATIENT_TOKEN}"] } }`,
    });
    const opened: OpenStream[] = [];
    try {
      // One after the other, as a console tab reconnecting in a loop does, until it is refused (at most the
      // process's 256 and one more).
      let greedyRefused: Outcome | null = null;
      for (let i = 0; i <= 256 && greedyRefused === null; i += 1) {
        const outcome = await openStream(node.url, bearer(GREEDY_TOKEN));
        if ('stream' in outcome) opened.push(outcome.stream);
        else greedyRefused = outcome;
      }
      const patient = await openStream(node.url, bearer(PATIENT_TOKEN));
      if ('stream' in patient) opened.push(patient.stream);
      expect({
        greedyOpened: opened.length - ('stream' in patient ? 1 : 0),
        greedyRefused: greedyRefused && refusal(greedyRefused),
        patient: refusal(patient),
      }).toEqual({
        greedyOpened: 16,
        greedyRefused: {
          status: 429,
          code: 'QUEUE_FULL',
          limit: 'control.maxStreamsPerClient',
          max: 16,
          retryAfter: '5',
        },
        patient: { status: 200 },
      });
    } finally {
      for (const stream of opened) stream.close();
    }
  }, 120_000);

  it('bounds each JWT subject and the process, counts refusals, and gives a closed stream’s slot back', async () => {
    await using dir = await tempDir('sluice-app-stream-limit-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: `control: { auth: { jwtSecret: "${SECRET}" }, maxStreams: 4, maxStreamsPerClient: 2 }`,
    });
    const greedy = jwt({ sub: 'greedy' });
    const opened: OpenStream[] = [];
    try {
      const greedyOutcomes: Outcome[] = [];
      for (let i = 0; i < 4; i += 1) greedyOutcomes.push(await openStream(node.url, greedy));
      for (const outcome of greedyOutcomes) if ('stream' in outcome) opened.push(outcome.stream);
      const patient = await openStream(node.url, jwt({ sub: 'patient' }));
      if ('stream' in patient) opened.push(patient.stream);
      expect({ greedy: greedyOutcomes.map((o) => o.status), patient: patient.status }).toEqual({
        greedy: [200, 200, 429, 429],
        patient: 200,
      });
      const perClient = {
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'control.maxStreamsPerClient',
        max: 2,
        retryAfter: '5',
      };
      expect(refusal(greedyOutcomes[2]!)).toEqual(perClient);
      // A renewed token of the same subject is the same client.
      expect(refusal(await openStream(node.url, jwt({ sub: 'greedy', exp: 4_102_444_800 })))).toEqual(
        perClient,
      );

      // The process-wide bound still holds, and says which bound it is.
      opened.push(streamOf(await openStream(node.url, jwt({ sub: 'third' }))));
      expect(refusal(await openStream(node.url, jwt({ sub: 'fourth' })))).toEqual({
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'control.maxStreams',
        max: 4,
        retryAfter: '5',
      });

      const metrics = await (await fetch(`${node.url}/metrics`, { headers: greedy })).text();
      expect(metrics).toMatch(/^sluice_endpoint_stream_refusals_total\{limit="client"\} 3$/m);
      expect(metrics).toMatch(/^sluice_endpoint_stream_refusals_total\{limit="server"\} 1$/m);
      expect(metrics).toMatch(/^sluice_endpoint_stream_watchers 4$/m);

      // A closed stream gives its client's slot back (and the process's): the greedy client opens one again.
      opened.shift()!.close();
      const again = await waitFor(
        async () => {
          const outcome = await openStream(node.url, greedy);
          return 'stream' in outcome ? outcome.stream : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 100, what: 'the closed stream’s slot to be given back' },
      );
      opened.push(again);
      // Full again (the process's 4 are open: the server bound, checked first, answers).
      expect(refusal(await openStream(node.url, greedy))).toMatchObject({ status: 429, code: 'QUEUE_FULL' });
    } finally {
      for (const stream of opened) stream.close();
    }
  }, 120_000);

  it('without control.auth a client is its remote address', async () => {
    await using dir = await tempDir('sluice-app-stream-limit-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: 'control: { maxStreamsPerClient: 1 }',
    });
    const opened: OpenStream[] = [];
    try {
      opened.push(streamOf(await openStream(node.url, {}, { localAddress: '127.0.0.1' })));
      expect(refusal(await openStream(node.url, {}, { localAddress: '127.0.0.1' }))).toMatchObject({
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'control.maxStreamsPerClient',
        max: 1,
      });
      // Another address (the whole 127/8 is loopback) is another client.
      opened.push(streamOf(await openStream(node.url, {}, { localAddress: '127.0.0.2' })));
    } finally {
      for (const stream of opened) stream.close();
    }
  }, 120_000);
});
