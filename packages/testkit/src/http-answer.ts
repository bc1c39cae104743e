import { type Agent, request } from 'node:http';

/** How long {@link httpCall} waits for an answer before it counts as none (`NO_ANSWER`). */
const ANSWER_TIMEOUT_MS = 15_000;

/** An answer {@link httpGet} read to its end. */
export interface HttpAnswer {
  status: number;
  /** The `Connection` header: `close` when the server retires the connection after this answer. */
  connection: string | undefined;
  body: string;
}

/**
 * Sends `method` to `url` through `agent` (a keep-alive agent reuses its connection; `false` opens a new one), with
 * `json` as the body when given, and resolves with the answer, or with the error's code (`ECONNRESET`,
 * `ECONNREFUSED` …) when none came: never rejects, so a test counts failures as outcomes.
 *
 * @example
 * ```ts
 * const answer = await httpCall('POST', `${url}/v1/endpoints/items/query`, agent, { $limit: 5 });
 * if (typeof answer === 'string' || answer.status !== 200) failures.push(answer);
 * ```
 */
export function httpCall(
  method: 'GET' | 'POST',
  url: string,
  agent: Agent | false,
  json?: unknown,
): Promise<HttpAnswer | string> {
  return new Promise((resolve) => {
    const body = json === undefined ? undefined : JSON.stringify(json);
    const headers = body === undefined ? {} : { 'content-type': 'application/json' };
    const req = request(url, { method, agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body: text }),
      );
      res.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    // No answer at all is an outcome too (a connection the server neither answers nor closes), not a hung test.
    req.setTimeout(ANSWER_TIMEOUT_MS, () =>
      req.destroy(Object.assign(new Error('no answer'), { code: 'NO_ANSWER' })),
    );
    req.end(body);
  });
}

/** {@link httpCall} with `GET`. */
export function httpGet(url: string, agent: Agent | false): Promise<HttpAnswer | string> {
  return httpCall('GET', url, agent);
}

/**
 * Polls `<url>/readyz` on new connections, as a load balancer's health check does, until it answers anything but
 * 200; resolves with that answer (or error code).
 */
export async function firstNotReady(url: string): Promise<HttpAnswer | string> {
  for (;;) {
    const answer = await httpGet(`${url}/readyz`, false);
    if (typeof answer === 'string' || answer.status !== 200) return answer;
  }
}
