/**
 * Hostile HTTP requests for the apps' property-style boundary tests: a raw-socket client that sends what a client
 * library never would (bytes that are not UTF-8 in the request line and headers, duplicate headers, bodies cut short
 * or declared larger than sent), catalogues of hostile values (JSON numbers past a double, deep nesting, reserved
 * keys, malformed bearer tokens) and the invariant every refusal must keep (a problem with a stable code, never a 5xx).
 */
import { createHmac } from 'node:crypto';
import { connect } from 'node:net';
import { STATUS_BY_CODE } from '@sluice/core';
import type { SeededRandom } from './random.js';

/** How a {@link RawRequest}'s body goes on the wire. */
export const BodyFraming = {
  /** `content-length` of the whole body, then the body. */
  length: 'length',
  /** `transfer-encoding: chunked`, the body in a few chunks, then the last chunk. */
  chunked: 'chunked',
  /** Chunked, the last chunk never sent, then the client half-closes: a body cut short. */
  chunkedCut: 'chunked-cut',
  /** A `content-length` larger than what is sent, then the client half-closes: a body cut short. */
  lengthCut: 'length-cut',
  /**
   * A `content-length` of `declaredBytes` (larger than the body limit) of which only the body is sent, the
   * connection left open: the answer must come while the rest is still owed (the limit is enforced before reading
   * it all).
   */
  oversized: 'oversized',
} as const;
export type BodyFraming = (typeof BodyFraming)[keyof typeof BodyFraming];

/** A request as bytes: anything goes, nothing is checked or escaped. */
export interface RawRequest {
  method: string;
  /** The request target as sent (may hold bytes that are not UTF-8). */
  target: string | Buffer;
  /** Headers in order, duplicates allowed; `host` is added first unless `omitHost`. */
  headers: Array<[string, string | Buffer]>;
  body?: Buffer;
  framing?: BodyFraming;
  /** For {@link BodyFraming.oversized}: the declared `content-length`. */
  declaredBytes?: number;
  omitHost?: boolean;
  /** `HTTP/1.1` unless said otherwise. */
  version?: string;
}

/** What came back for a {@link RawRequest}. */
export interface RawAnswer {
  /** The final status (after any 1xx), or null when the connection closed without an answer. */
  status: number | null;
  /** Response headers, names in lower case (repeated ones joined by `, `). */
  headers: Record<string, string>;
  body: Buffer;
  /** The answer is an event stream: only its head was read. */
  stream: boolean;
  /** A socket error seen, if any (a reset after the answer is not a failure of the server). */
  error: string | null;
}

const CRLF = '\r\n';

function requestHead(port: number, request: RawRequest): Buffer {
  const parts: Buffer[] = [
    Buffer.from(`${request.method} `, 'latin1'),
    Buffer.isBuffer(request.target) ? request.target : Buffer.from(request.target, 'utf8'),
    Buffer.from(` ${request.version ?? 'HTTP/1.1'}${CRLF}`, 'latin1'),
  ];
  const header = (name: string, value: string | Buffer) =>
    parts.push(
      Buffer.from(`${name}: `, 'latin1'),
      Buffer.isBuffer(value) ? value : Buffer.from(value, 'utf8'),
      Buffer.from(CRLF, 'latin1'),
    );
  if (!request.omitHost) header('host', `127.0.0.1:${port}`);
  for (const [name, value] of request.headers) header(name, value);
  const body = request.body;
  const framing = request.framing ?? BodyFraming.length;
  if (body !== undefined) {
    if (framing === BodyFraming.chunked || framing === BodyFraming.chunkedCut)
      header('transfer-encoding', 'chunked');
    else if (framing === BodyFraming.lengthCut) header('content-length', String(body.length + 17));
    else if (framing === BodyFraming.oversized)
      header('content-length', String(request.declaredBytes ?? body.length));
    else header('content-length', String(body.length));
  }
  parts.push(Buffer.from(CRLF, 'latin1'));
  return Buffer.concat(parts);
}

function chunkedBody(body: Buffer, last: boolean): Buffer {
  const parts: Buffer[] = [];
  const size = Math.max(1, Math.ceil(body.length / 3));
  for (let at = 0; at < body.length; at += size) {
    const piece = body.subarray(at, at + size);
    parts.push(Buffer.from(`${piece.length.toString(16)}${CRLF}`, 'latin1'), piece, Buffer.from(CRLF));
  }
  if (last) parts.push(Buffer.from(`0${CRLF}${CRLF}`, 'latin1'));
  return Buffer.concat(parts);
}

interface Head {
  status: number;
  headers: Record<string, string>;
  end: number;
}

function parseHead(data: Buffer, from: number): Head | null {
  const end = data.indexOf('\r\n\r\n', from, 'latin1');
  if (end < 0) return null;
  const lines = data.subarray(from, end).toString('latin1').split(CRLF);
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? Number.NaN);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  return { status, headers, end: end + 4 };
}

/** The body of a chunked answer once its last chunk arrived, else null. */
function dechunk(data: Buffer): Buffer | null {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const line = data.indexOf(CRLF, at, 'latin1');
    if (line < 0) return null;
    const size = Number.parseInt(data.subarray(at, line).toString('latin1'), 16);
    if (!Number.isFinite(size)) return null;
    if (size === 0) return Buffer.concat(parts);
    if (data.length < line + 2 + size + 2) return null;
    parts.push(data.subarray(line + 2, line + 2 + size));
    at = line + 2 + size + 2;
  }
}

/**
 * Sends `request` over a new connection to 127.0.0.1:`port` and resolves with the answer: complete once its
 * `content-length` (or last chunk) arrived, at the head for an event stream, else when the server closes. The
 * connection is then destroyed. A request with a cut framing half-closes after its bytes; an oversized one never
 * sends the rest of what it declared. Rejects after `timeoutMs` without an answer.
 *
 * @example
 * ```ts
 * const answer = await sendRawRequest(port, { method: 'GET', target: '/v1/%zz', headers: [] });
 * answer.status; // 400
 * ```
 */
export function sendRawRequest(
  port: number,
  request: RawRequest,
  options: { timeoutMs?: number } = {},
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let error: string | null = null;
    let settled = false;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      socket.destroy();
      reject(new Error(`no answer within ${options.timeoutMs ?? 15_000} ms`));
    }, options.timeoutMs ?? 15_000);
    const finish = (answer: RawAnswer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    /** The answer when complete (or `closed`: whatever arrived), else null. */
    const complete = (closed: boolean): RawAnswer | null => {
      let from = 0;
      for (;;) {
        const head = parseHead(data, from);
        if (head === null)
          return closed
            ? { status: null, headers: {}, body: data.subarray(from), stream: false, error }
            : null;
        // Interim answers (100 Continue) are followed by the real one.
        if (head.status >= 100 && head.status < 200) {
          from = head.end;
          continue;
        }
        const rest = data.subarray(head.end);
        const answer = (body: Buffer, stream = false): RawAnswer => ({
          status: head.status,
          headers: head.headers,
          body,
          stream,
          error,
        });
        if ((head.headers['content-type'] ?? '').startsWith('text/event-stream')) return answer(rest, true);
        if (request.method === 'HEAD' || head.status === 204 || head.status === 304)
          return answer(Buffer.alloc(0));
        const length = head.headers['content-length'];
        if (length !== undefined)
          return rest.length >= Number(length) ? answer(rest.subarray(0, Number(length))) : null;
        if ((head.headers['transfer-encoding'] ?? '').includes('chunked')) {
          const body = dechunk(rest);
          return body !== null ? answer(body) : closed ? answer(rest) : null;
        }
        return closed ? answer(rest) : null;
      }
    };
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const answer = complete(false);
      if (answer) finish(answer);
    });
    socket.on('error', (err) => {
      error ??= err.message;
    });
    socket.on('close', () => finish(complete(true)!));
    socket.on('connect', () => {
      const framing = request.framing ?? BodyFraming.length;
      const body = request.body;
      const bodyBytes =
        body === undefined
          ? Buffer.alloc(0)
          : framing === BodyFraming.chunked
            ? chunkedBody(body, true)
            : framing === BodyFraming.chunkedCut
              ? chunkedBody(body, false)
              : body;
      socket.write(Buffer.concat([requestHead(port, request), bodyBytes]));
      if (framing === BodyFraming.chunkedCut || framing === BodyFraming.lengthCut) socket.end();
    });
  });
}

/** JSON texts that stress a parser or a schema wherever a value may stand. */
export const HOSTILE_JSON_VALUES: readonly string[] = [
  '1e309',
  '-1e309',
  '-0',
  '9007199254740993',
  '-9007199254740993',
  '1e-400',
  '0.1e1',
  '1E+2',
  '123456789012345678901234567890',
  'null',
  'true',
  'false',
  '[]',
  '{}',
  '""',
  '"\\u0000"',
  '"a\\u0000b"',
  '"\\ud800"',
  '"\\udfff\\ud800"',
  '"\\u202e\\ufeff"',
  '"../../../../etc/passwd"',
  '"/etc/passwd"',
  '"%00"',
  '"$gt"',
  '{"$gt": 1}',
  '{"$where": "1"}',
  '{"__proto__": {"polluted": true}}',
  '{"constructor": {"prototype": {"polluted": true}}}',
  '{"prototype": 1}',
  '{"toString": 1, "valueOf": 2, "hasOwnProperty": 3}',
  '[null, {}, [], "", 0]',
  '{"a": 1, "a": 2}',
];

/** A JSON text nested `depth` levels deep: arrays (`[[[…]]]`) or objects (`{"a":{"a":…}}`). */
export function deepJson(depth: number, kind: 'array' | 'object'): string {
  return kind === 'array'
    ? `${'['.repeat(depth)}${']'.repeat(depth)}`
    : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
}

const PLACEHOLDER = '\u0001hostile\u0001';

type JsonPath = Array<string | number>;

function pathsOf(value: unknown, at: JsonPath, out: JsonPath[]): void {
  out.push(at);
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) pathsOf(item, [...at, i], out);
  } else if (value !== null && typeof value === 'object')
    for (const [key, item] of Object.entries(value)) pathsOf(item, [...at, key], out);
}

function withValueAt(value: unknown, path: JsonPath, replacement: unknown): unknown {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path;
  if (Array.isArray(value))
    return value.map((item, i) => (i === head ? withValueAt(item, rest, replacement) : item));
  const copy = { ...(value as Record<string, unknown>) };
  copy[head as string] = withValueAt(copy[head as string], rest, replacement);
  return copy;
}

/** `source.path`, `options`, `(root)`: a path as the APIs name it. */
export function jsonPathText(path: JsonPath): string {
  if (path.length === 0) return '(root)';
  return path.reduce<string>(
    (text, part) =>
      typeof part === 'number' ? `${text}[${part}]` : text === '' ? String(part) : `${text}.${part}`,
    '',
  );
}

/**
 * `base` as JSON text with one place made hostile: the value at a random path replaced by `hostile` (raw JSON text),
 * or a key `hostileKey` added to a random object (`__proto__`, `constructor` …). Returns the text and where.
 *
 * @example
 * ```ts
 * const { text, at } = jsonWithHostileValue(rng, { $filter: { value: 1 } }, '1e309');
 * ```
 */
export function jsonWithHostileValue(
  rng: SeededRandom,
  base: unknown,
  hostile: string,
  hostileKey?: string,
): { text: string; at: string } {
  const paths: JsonPath[] = [];
  pathsOf(base, [], paths);
  if (hostileKey !== undefined) {
    const objects = paths.filter((path) => {
      let value: unknown = base;
      for (const part of path) value = (value as Record<string, unknown>)[part as string];
      return value !== null && typeof value === 'object' && !Array.isArray(value);
    });
    const at = rng.pick(objects.length > 0 ? objects : [[]]);
    const keyed = withValueAt(base, [...at, PLACEHOLDER], 0);
    const text = JSON.stringify(keyed).replace(
      `"${PLACEHOLDER}":0`,
      `${JSON.stringify(hostileKey)}:${hostile}`,
    );
    return { text, at: jsonPathText([...at, hostileKey]) };
  }
  const at = rng.pick(paths);
  const text = JSON.stringify(withValueAt(base, at, PLACEHOLDER)).replace(`"${PLACEHOLDER}"`, hostile);
  return { text, at: jsonPathText(at) };
}

/** Keys a parser must never turn into a prototype, and other names worth a try wherever a name is read. */
export const HOSTILE_KEYS: readonly string[] = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'hasOwnProperty',
  '$gt',
  '',
  ' ',
  'a.b',
  'a[0]',
  '\u0000',
  'é',
];

/**
 * Path segments that are malformed or hostile as they appear in a request target (already encoded): percent
 * errors, percent-encoded bytes that are not UTF-8, NUL, reserved names, dot segments, very long ones.
 */
export function hostileSegment(rng: SeededRandom): string | Buffer {
  const pick = rng.int(0, 17);
  switch (pick) {
    case 0:
      return '%';
    case 1:
      return '%zz';
    case 2:
      return 'a%c3%28b'; // percent-encoded bytes that are not UTF-8
    case 3:
      return '%ff%fe';
    case 4:
      return 'a%00b';
    case 5:
      return Buffer.from([0x61, 0xff, 0xfe, 0x62]); // raw bytes that are not UTF-8
    case 6:
      return Buffer.from([0x61, 0xc3, 0x28]);
    case 7:
      return '__proto__';
    case 8:
      return 'constructor';
    case 9:
      return '..';
    case 10:
      return '%2e%2e';
    case 11:
      return 'x'.repeat(rng.pick([1_023, 1_025, 9_001, 12_000]));
    case 12:
      return '%E2%80%AE%EF%BB%BF'; // RLO and BOM
    case 13:
      return 'a%2Fb';
    case 14:
      return '9007199254740993';
    case 15:
      return '-0';
    case 16:
      return '1e309';
    default:
      return encodeURIComponent('é😀').repeat(rng.int(1, 400));
  }
}

/** A query string (without `?`) that is malformed or hostile, or carries `extra` pairs the route may know. */
export function hostileQuery(rng: SeededRandom, known: readonly string[]): string {
  const name = () => rng.pick([...known, ...HOSTILE_KEYS.map(encodeURIComponent), 'unknown', 'a[b]', '%zz']);
  const value = () =>
    rng.pick([
      '',
      '1e309',
      '-0',
      '9007199254740993',
      'NaN',
      '-1',
      '0',
      '1.5',
      '%',
      '%zz',
      '%c3%28',
      '%00',
      '__proto__',
      '%7B%22__proto__%22%3A1%7D',
      'x'.repeat(rng.pick([10, 2_000, 9_000])),
      encodeURIComponent(deepJson(rng.int(50, 5_000), rng.pick(['array', 'object'] as const))),
      'true',
      '[]',
    ]);
  const pairs: string[] = [];
  const count = rng.int(1, 4);
  for (let i = 0; i < count; i++) {
    const n = name();
    pairs.push(rng.chance(0.1) ? n : `${n}=${value()}`);
    if (rng.chance(0.3)) pairs.push(`${n}=${value()}`); // the same key again
  }
  return pairs.join(rng.pick(['&', '&&', '&;']));
}

/** Content types a JSON route must refuse (415) or read as JSON, and their edges. */
export const HOSTILE_CONTENT_TYPES: readonly string[] = [
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  '',
  ' ',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'application/json; charset=',
  'application/json; charset="utf-8',
  'application/json;;;',
  'application/json, text/plain',
  'APPLICATION/JSON',
  'application/jsonx',
  'application/json\u0000',
  'application/vnd.sluice+json; charset=utf-8',
  'application/problem+json',
  'application/+json',
  `application/json; ${'a=b; '.repeat(500)}`,
  'application/json; charset=utf-8; charset=latin1',
  'application/*',
  '*/*',
];

/**
 * Bearer tokens malformed in every part, derived from a `valid` one — scheme, separator, segments, encoding, the
 * JOSE header, the claims, the signature, the length. `secret`, when given, signs some of them validly with claims
 * that are not what the server expects (a valid signature over garbage claims).
 *
 * @example
 * ```ts
 * const header = malformedBearer(rng, `Bearer ${token}`, { secret, claims: { endpoints: '*' } });
 * ```
 */
export function malformedBearer(
  rng: SeededRandom,
  validToken: string,
  options: { secret?: string; claims?: Record<string, unknown> } = {},
): string | Buffer {
  const b64 = (value: unknown) =>
    Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
  const sign = (head: string) =>
    options.secret ? createHmac('sha256', options.secret).update(head).digest('base64url') : 'c2ln';
  const signed = (header: unknown, payload: unknown) => {
    const head = `${b64(header)}.${b64(payload)}`;
    return `${head}.${sign(head)}`;
  };
  const claims = options.claims ?? {};
  const hs256 = { alg: 'HS256', typ: 'JWT' };
  const [h = '', p = '', s = ''] = validToken.split('.');
  const token = rng.pick<() => string | Buffer>([
    () => '',
    () => 'Bearer',
    () => 'Bearer ',
    () => `bearer  ${validToken}`,
    () => `Basic ${validToken}`,
    () => `Bearer:${validToken}`,
    () => `Bearer ${validToken} extra`,
    () => `Bearer "${validToken}"`,
    () => `Bearer ${validToken}\t`,
    () => `Bearer ${'a'.repeat(8_193)}`,
    () => `Bearer ${validToken.slice(0, -1)}`,
    () => `Bearer ${validToken}x`,
    () => `Bearer ${h}`,
    () => `Bearer ${h}.${p}`,
    () => `Bearer ${h}.${p}.${s}.${s}`,
    () => `Bearer ..`,
    () => `Bearer ${h}..${s}`,
    () => `Bearer !!!.${p}.${s}`,
    () => `Bearer ${h}.${p}.${s.replaceAll(/[A-Za-z]/g, '+')}`,
    () => `Bearer ${b64('not json')}.${p}.${s}`,
    () => `Bearer ${b64({ alg: 'none', typ: 'JWT' })}.${p}.`,
    () => `Bearer ${signed({ alg: 'none' }, claims)}`,
    () => `Bearer ${signed({ alg: 'HS512', typ: 'JWT' }, claims)}`,
    () => `Bearer ${signed({ alg: 'RS256', typ: 'JWT' }, claims)}`,
    () => `Bearer ${signed([], claims)}`,
    () => `Bearer ${signed(null, claims)}`,
    () => `Bearer ${signed({ ...hs256, crit: ['x'] }, claims)}`,
    () => `Bearer ${signed({ ...hs256, kid: '../../etc/passwd' }, claims)}`,
    () => `Bearer ${signed(hs256, 'not json')}`,
    () => `Bearer ${signed(hs256, [])}`,
    () => `Bearer ${signed(hs256, null)}`,
    () => `Bearer ${signed(hs256, 42)}`,
    () => `Bearer ${signed(hs256, {})}`,
    () => `Bearer ${signed(hs256, { ...claims, exp: 'tomorrow' })}`,
    () =>
      `Bearer ${`${b64(hs256)}.${b64('{"exp":1e309}')}`}.${sign(`${b64(hs256)}.${b64('{"exp":1e309}')}`)}`,
    () => `Bearer ${signed(hs256, { ...claims, exp: -1 })}`,
    () => `Bearer ${signed(hs256, { ...claims, nbf: 99_999_999_999 })}`,
    () => `Bearer ${signed(hs256, { ...claims, iat: 'x', sub: { a: 1 }, jti: [1] })}`,
    () => `Bearer ${signed(hs256, { ...claims, endpoints: 5 })}`,
    () => `Bearer ${signed(hs256, { ...claims, endpoints: [null, {}] })}`,
    () => `Bearer ${signed(hs256, { ...claims, filter: 'region' })}`,
    () => `Bearer ${signed(hs256, { ...claims, filter: { $where: '1' } })}`,
    () => `Bearer ${signed(hs256, { ...claims, filter: JSON.parse(deepJson(200, 'object')) })}`,
    () => `Bearer ${signed(hs256, { ...claims, filters: { __proto__: null, items: [] } })}`,
    () =>
      `Bearer ${`${b64(hs256)}.${b64('{"endpoints":"*","filter":{"__proto__":{"x":1}}}')}`}.${sign(`${b64(hs256)}.${b64('{"endpoints":"*","filter":{"__proto__":{"x":1}}}')}`)}`,
    () => Buffer.concat([Buffer.from('Bearer '), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from(validToken)]),
    () => `Bearer ${validToken.replace(/./, 'é')}`,
  ])();
  return token;
}

/** Codes a server may answer 5xx with for a reason outside the request (a dependency outage, a position not yet reached). */
export const OUTAGE_CODES: ReadonlySet<string> = new Set([
  'STORE_UNAVAILABLE',
  'BACKPLANE_UNAVAILABLE',
  'POSITION_NOT_REACHED',
  'ENDPOINT_NOT_READY',
  'NODE_SHUTTING_DOWN',
]);

/** A readable one-line description of a raw request, for failure messages (bytes that are not text escaped). */
export function describeRawRequest(request: RawRequest): string {
  const text = (value: string | Buffer) =>
    JSON.stringify(Buffer.isBuffer(value) ? value.toString('latin1') : value).slice(0, 300);
  const headers = request.headers.map(([name, value]) => `${name}: ${text(value)}`).join(' | ');
  const body =
    request.body === undefined
      ? 'no body'
      : `${request.framing ?? 'length'} body ${request.body.length} B ${text(request.body.subarray(0, 200))}`;
  return `${request.method} ${text(request.target)} [${headers}] ${body}${request.omitHost ? ' (no host)' : ''}`;
}

/** Headers a request may send once (RFC 9112 § 3.2 for Host; the others decide how the body is read and who asks). */
const SINGLE_HEADER_NAMES = ['host', 'content-type', 'authorization'];

/** What makes `request`'s header lines ambiguous — a repeated single header, an unmet `Expect` — or null. */
function ambiguousHeaderLine(request: RawRequest): string | null {
  const names = request.headers.map(([name]) => name.toLowerCase());
  if (!request.omitHost) names.push('host');
  const repeated = SINGLE_HEADER_NAMES.find((name) => names.filter((n) => n === name).length > 1);
  if (repeated !== undefined) return `two ${repeated} lines`;
  const expectation = request.headers.find(([name]) => name.toLowerCase() === 'expect')?.[1];
  if (expectation !== undefined && !/(?:^|\W)100-continue(?:$|\W)/i.test(expectation.toString('latin1')))
    return `an unmet expect`;
  return null;
}

/**
 * What is wrong with `answer` as the answer to a hostile request, or an empty list: an answer must come (unless the
 * request was cut short or not HTTP), never a 5xx other than an {@link OUTAGE_CODES} outage, never a success for a
 * request with two `Host` / `Content-Type` / `Authorization` lines or an unmet `Expect`, and every 4xx/5xx is an
 * RFC 9457 problem whose `code` has that status in core's table — with the failing places in `errors[].path` for a
 * validation failure, and an `instance` (when there is one) that is a path without its query string.
 */
export function answerViolations(request: RawRequest, answer: RawAnswer): string[] {
  const problems: string[] = [];
  const cut = request.framing === BodyFraming.chunkedCut || request.framing === BodyFraming.lengthCut;
  if (answer.status === null) {
    if (!cut) problems.push(`no answer (${answer.error ?? 'closed'})`);
    return problems;
  }
  const status = answer.status;
  const ambiguous = ambiguousHeaderLine(request);
  if (status < 400 && ambiguous !== null) problems.push(`${status} to a request with ${ambiguous}`);
  if (answer.stream || status < 400) return problems;
  let body: Record<string, unknown> | null = null;
  const type = answer.headers['content-type'] ?? '';
  if (!type.startsWith('application/problem+json')) problems.push(`${status} with content-type "${type}"`);
  if (request.method !== 'HEAD') {
    try {
      body = JSON.parse(answer.body.toString('utf8')) as Record<string, unknown>;
    } catch {
      problems.push(`${status} with a body that is not JSON: ${answer.body.toString('utf8').slice(0, 200)}`);
    }
  }
  const code = typeof body?.code === 'string' ? body.code : undefined;
  if (status >= 500 && !(code !== undefined && OUTAGE_CODES.has(code)))
    problems.push(
      `${status} ${code ?? ''}: ${String(body?.detail ?? answer.body.toString('utf8').slice(0, 200))}`,
    );
  if (body === null) return problems;
  const table = STATUS_BY_CODE as Record<string, number>;
  if (code === undefined || table[code] === undefined)
    problems.push(`no stable code: ${JSON.stringify(body).slice(0, 300)}`);
  else if (table[code] !== status)
    problems.push(`code ${code} with status ${status} (its status is ${table[code]})`);
  if (body.status !== status) problems.push(`body.status ${String(body.status)} ≠ ${status}`);
  if (typeof body.detail !== 'string' || body.detail === '') problems.push('no detail');
  if (body.instance !== undefined && (typeof body.instance !== 'string' || body.instance.includes('?')))
    problems.push(`instance ${JSON.stringify(body.instance).slice(0, 100)} is not a path`);
  if (code === 'VALIDATION_FAILED' || code === 'INVALID_QUERY') {
    const errors = body.errors;
    if (
      !Array.isArray(errors) ||
      errors.length === 0 ||
      errors.some((e) => typeof e?.path !== 'string' || e.path === '' || typeof e?.message !== 'string')
    )
      problems.push(`${code} without the failing paths: ${JSON.stringify(body).slice(0, 300)}`);
  }
  return problems;
}

/** One route of an API as the fuzzer sees it: where it is, what it reads, and a request it would accept. */
export interface FuzzRoute {
  method: 'GET' | 'POST';
  /** The path with `:name` parameters, e.g. `/v1/transfers/:id`. */
  path: string;
  /** A value each parameter may take (encoded as it goes in the path). */
  params?: Record<string, string>;
  /** The query-string parameters it takes, with a value each. */
  query?: Record<string, string>;
  /** The headers it reads (besides `authorization` and `content-type`), with a value each. */
  headers?: Record<string, string>;
  /** A body it takes (POST); `n` numbers the request, for ids that must not repeat. */
  body?: (n: number) => unknown;
}

/** What {@link hostileRequest} needs to know about the server under test. */
export interface HostileContext {
  /** `http.bodyBytes` of the server: strings and bodies are sized around it. */
  bodyLimit: number;
  /** A valid `authorization` value when auth is on (sent unless a mutation breaks it), else undefined. */
  authorization?: string;
  /** Makes malformed bearer tokens from the valid one (when auth is on). */
  badBearer?: (rng: SeededRandom) => string | Buffer;
  /** Values of the route's headers that are garbage, by header name (e.g. `last-event-id`). */
  headerGarbage?: Record<string, readonly string[]>;
}

/** What was done to a request: one label per mutation, for the failure message and the statistics. */
export interface HostileRequest {
  request: RawRequest;
  mutations: string[];
}

const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'TRACE', 'PROPFIND', 'SEARCH'];

function fillPath(route: FuzzRoute, replace?: { name: string; value: string | Buffer }): Buffer {
  const parts = route.path.split(/(:[a-zA-Z]+)/);
  return Buffer.concat(
    parts.map((part) => {
      if (!part.startsWith(':')) return Buffer.from(part, 'latin1');
      const name = part.slice(1);
      const value = replace?.name === name ? replace.value : (route.params?.[name] ?? 'x');
      return Buffer.isBuffer(value) ? value : Buffer.from(value, 'latin1');
    }),
  );
}

/** A body text around `limit` bytes: a string value padded to just under, at, or just over it. */
function sizedBody(rng: SeededRandom, base: unknown, limit: number): { text: string; label: string } {
  const skeleton = JSON.stringify({ pad: '', base });
  const target = limit + rng.pick([-1, 0, 1, 4_096]) - skeleton.length;
  const text = JSON.stringify({ pad: 'p'.repeat(Math.max(0, target)), base });
  return { text, label: `body of ${Buffer.byteLength(text)} B (limit ${limit})` };
}

/** One hostile body for `route`, and what makes it so. */
function hostileBody(
  rng: SeededRandom,
  route: FuzzRoute,
  n: number,
  context: HostileContext,
): { body: Buffer; label: string } {
  const base = route.body?.(n) ?? {};
  const text = (value: string, label: string) => ({ body: Buffer.from(value, 'utf8'), label });
  switch (rng.int(0, 12)) {
    case 0:
    case 1: {
      const hostile = rng.pick(HOSTILE_JSON_VALUES);
      const { text: json, at } = jsonWithHostileValue(rng, base, hostile);
      return text(json, `${hostile} at ${at}`);
    }
    case 2: {
      const key = rng.pick(HOSTILE_KEYS);
      const { text: json, at } = jsonWithHostileValue(rng, base, rng.pick(['1', '{}', '"x"', 'null']), key);
      return text(json, `key ${JSON.stringify(key)} at ${at}`);
    }
    case 3: {
      const depth = rng.pick([64, 1_000, 10_000, 100_000]);
      const deep = deepJson(depth, rng.pick(['array', 'object'] as const));
      const { text: json, at } = jsonWithHostileValue(rng, base, deep);
      return text(json, `nested ${depth} deep at ${at}`);
    }
    case 4: {
      const count = rng.pick([1_023, 1_024, 1_025, 10_001, 100_000]);
      const array = `[${Array.from({ length: count }, (_, i) => String(i)).join(',')}]`;
      const { text: json, at } = jsonWithHostileValue(rng, base, array);
      return text(json, `array of ${count} at ${at}`);
    }
    case 5: {
      const length = rng.pick([127, 128, 129, 199, 200, 201, 255, 256, 257, 4_096, context.bodyLimit]);
      const { text: json, at } = jsonWithHostileValue(rng, base, JSON.stringify('s'.repeat(length)));
      return text(json, `string of ${length} at ${at}`);
    }
    case 6: {
      const { text: json, label } = sizedBody(rng, base, context.bodyLimit);
      return text(json, label);
    }
    case 7:
      return text(
        rng.pick(['null', '[]', '"x"', '0', 'true', '-0', '1e309', '[{}]']),
        'a root that is no object',
      );
    case 8: {
      const json = JSON.stringify(base);
      const cut = rng.int(0, Math.max(0, json.length - 1));
      return text(json.slice(0, cut), `JSON cut at ${cut}`);
    }
    case 9: {
      const json = Buffer.from(JSON.stringify(base), 'utf8');
      const at = rng.int(0, json.length);
      const bad = rng.pick([
        [0xff],
        [0xc3, 0x28],
        [0xed, 0xa0, 0x80],
        [0xf8, 0x88, 0x80, 0x80, 0x80],
        [0xc0, 0xaf],
      ]);
      return {
        body: Buffer.concat([json.subarray(0, at), Buffer.from(bad), json.subarray(at)]),
        label: `bytes ${Buffer.from(bad).toString('hex')} (not UTF-8) at byte ${at}`,
      };
    }
    case 10: {
      const json = JSON.stringify(base);
      const at = rng.int(0, json.length);
      return text(`${json.slice(0, at)}\u0000${json.slice(at)}`, `a raw NUL at ${at}`);
    }
    case 11:
      return text(rng.pick(['', ' ', '\ufeff{}', '{}{}', '{} x', '{"a":1,}', "{'a':1}", 'NaN']), 'not JSON');
    default: {
      // Every value's type wrong, in turn: a string where a number goes, an object where a string goes, …
      const paths: JsonPath[] = [];
      pathsOf(base, [], paths);
      const at = rng.pick(paths.filter((path) => path.length > 0).concat([[]]));
      const wrong = rng.pick(['"1"', '1', '{}', '[]', 'true', 'null', '"*"']);
      const json = JSON.stringify(withValueAt(base, at, PLACEHOLDER)).replace(`"${PLACEHOLDER}"`, wrong);
      return text(json, `${wrong} at ${jsonPathText(at)}`);
    }
  }
}

/**
 * A request to `route` made hostile by one to three mutations (method, path parameter, extra path, query string,
 * body, content type, framing, headers, bearer token, length); the unmutated parts are those of a request the route
 * takes. `n` numbers the request (ids in bodies stay unique).
 *
 * @example
 * ```ts
 * const { request, mutations } = hostileRequest(rng, { method: 'GET', path: '/v1/transfers/:id', params: { id: 'a' } }, 7, { bodyLimit });
 * const answer = await sendRawRequest(port, request);
 * ```
 */
export function hostileRequest(
  rng: SeededRandom,
  route: FuzzRoute,
  n: number,
  context: HostileContext,
): HostileRequest {
  let method: string = route.method;
  let target: Buffer = fillPath(route);
  let query = '';
  const headers: Array<[string, string | Buffer]> = [];
  let contentType: string | undefined = route.method === 'POST' ? 'application/json' : undefined;
  let authorization: string | Buffer | undefined = context.authorization;
  let body: Buffer | undefined =
    route.method === 'POST' && route.body ? Buffer.from(JSON.stringify(route.body(n)), 'utf8') : undefined;
  let framing: BodyFraming = BodyFraming.length;
  let declaredBytes: number | undefined;
  let omitHost = false;
  let version: string | undefined;
  const mutations: string[] = [];
  const count = rng.int(1, 3);
  for (let i = 0; i < count; i++) {
    switch (rng.int(0, 12)) {
      case 0:
        method = rng.pick(METHODS.filter((m) => m !== route.method));
        mutations.push(`method ${method}`);
        break;
      case 1: {
        const names = Object.keys(route.params ?? {});
        if (names.length === 0) {
          target = Buffer.concat([target, Buffer.from('/'), Buffer.from(hostileSegment(rng))]);
          mutations.push('an extra hostile segment');
          break;
        }
        const name = rng.pick(names);
        const value = hostileSegment(rng);
        target = fillPath(route, { name, value });
        mutations.push(
          `param ${name} = ${JSON.stringify(Buffer.isBuffer(value) ? value.toString('latin1') : value.slice(0, 40))}`,
        );
        break;
      }
      case 2: {
        const suffix = rng.pick([
          '/',
          '//',
          '/x',
          '/..',
          '/%2e%2e/%2e%2e',
          '?',
          '#frag',
          ';x=1',
          '/%',
          '/%00',
        ]);
        target = Buffer.concat([target, Buffer.from(suffix)]);
        mutations.push(`path + ${JSON.stringify(suffix)}`);
        break;
      }
      case 3:
        query = hostileQuery(rng, Object.keys(route.query ?? {}));
        mutations.push(`query ${query.slice(0, 80)}`);
        break;
      case 4: {
        const hostile = hostileBody(rng, route, n, context);
        body = hostile.body;
        if (contentType === undefined) contentType = 'application/json';
        mutations.push(`body: ${hostile.label}`);
        break;
      }
      case 5:
        contentType = rng.pick(HOSTILE_CONTENT_TYPES);
        if (body === undefined) body = Buffer.from('{}');
        mutations.push(`content-type ${JSON.stringify(contentType.slice(0, 60))}`);
        break;
      case 6: {
        if (body === undefined) body = Buffer.from(JSON.stringify(route.body?.(n) ?? {}));
        framing = rng.pick(Object.values(BodyFraming));
        if (framing === BodyFraming.oversized) {
          declaredBytes = context.bodyLimit * rng.pick([2, 64, 1024]) + 1;
          body = Buffer.concat([body, Buffer.alloc(context.bodyLimit + 1, 0x20)]);
        }
        if (contentType === undefined) contentType = 'application/json';
        mutations.push(`framing ${framing}${declaredBytes ? ` (declared ${declaredBytes} B)` : ''}`);
        break;
      }
      case 7: {
        const names = [...Object.keys(route.headers ?? {}), 'idempotency-key', 'accept', 'origin'];
        const name = rng.pick(names);
        const garbage = context.headerGarbage?.[name] ?? [];
        const value = rng.pick<string | Buffer>([
          ...garbage,
          '',
          ' ',
          'x'.repeat(rng.pick([200, 201, 1_025, 9_000])),
          Buffer.from([0xff, 0xfe, 0x80, 0x61]),
          Buffer.from('é😀', 'utf8'),
          '%zz',
          '__proto__',
          '1e309',
          '-0',
          '9007199254740993',
          '{"__proto__":1}',
        ]);
        headers.push([name, value]);
        if (rng.chance(0.3)) headers.push([name, value]); // the same header twice
        mutations.push(
          `header ${name}: ${JSON.stringify(Buffer.isBuffer(value) ? value.toString('latin1') : value.slice(0, 40))}`,
        );
        break;
      }
      case 8: {
        const pick = rng.int(0, 6);
        if (pick === 0)
          headers.push(['content-encoding', rng.pick(['gzip', 'br', 'x-unknown', 'identity, gzip'])]);
        else if (pick === 1) headers.push(['expect', rng.pick(['100-continue', 'garbage', '200-ok'])]);
        else if (pick === 2) headers.push(['x-padding', 'h'.repeat(rng.pick([15_000, 17_000, 40_000]))]);
        else if (pick === 3) omitHost = true;
        else if (pick === 4) version = rng.pick(['HTTP/1.0', 'HTTP/2.0', 'HTTP/1.9', 'HTTP/1.1 x']);
        else if (pick === 5)
          headers.push(
            rng.pick<[string, string]>([
              ['content-type', 'text/plain'],
              ['host', 'evil.example'],
              ['authorization', 'Bearer nope'],
            ]),
          ); // a second line of a header sent once
        else headers.push(['transfer-encoding', rng.pick(['chunked', 'gzip', 'identity'])]);
        mutations.push(
          `protocol edge ${pick}: ${headers.at(-1)?.[0] ?? ''}${omitHost ? ' no host' : ''}${version ?? ''}`,
        );
        break;
      }
      case 9:
        if (context.badBearer === undefined) {
          headers.push(['authorization', rng.pick(['Bearer x', 'Basic Zm9vOmJhcg==', ''])]);
          mutations.push('an authorization the server does not ask for');
          break;
        }
        authorization = rng.chance(0.15) ? undefined : context.badBearer(rng);
        mutations.push(
          `bearer ${authorization === undefined ? 'missing' : JSON.stringify(Buffer.isBuffer(authorization) ? authorization.toString('latin1') : authorization.slice(0, 60))}`,
        );
        break;
      case 10: {
        const length = rng.pick([8_000, 16_000, 70_000]);
        query = `${query}${query === '' ? '' : '&'}long=${'l'.repeat(length)}`;
        mutations.push(`a ${length}-character query`);
        break;
      }
      case 11: {
        const raw = rng.pick<Buffer>([
          Buffer.from([0xff]),
          Buffer.from('%'),
          Buffer.from('%c3%28'),
          Buffer.from('\u0000', 'latin1'),
          Buffer.from(' x'),
          Buffer.from('\t'),
        ]);
        target = Buffer.concat([target, Buffer.from('?q='), raw]);
        mutations.push(`query bytes ${raw.toString('hex')}`);
        break;
      }
      default: {
        const value = rng.pick(['*', 'http://evil.example/v1/transfers', '/v1/../healthz', '//v1/transfers']);
        target = Buffer.from(value);
        mutations.push(`target ${value}`);
        break;
      }
    }
  }
  const finalHeaders: Array<[string, string | Buffer]> = [];
  if (authorization !== undefined) finalHeaders.push(['authorization', authorization]);
  if (contentType !== undefined && body !== undefined) finalHeaders.push(['content-type', contentType]);
  finalHeaders.push(...headers);
  if (query !== '')
    target = Buffer.concat([target, Buffer.from(target.includes('?') ? '&' : '?'), Buffer.from(query)]);
  const request: RawRequest = {
    method,
    target,
    headers: finalHeaders,
    ...(body === undefined ? {} : { body }),
    framing,
    ...(declaredBytes === undefined ? {} : { declaredBytes }),
    omitHost,
    ...(version === undefined ? {} : { version }),
  };
  return { request, mutations };
}
