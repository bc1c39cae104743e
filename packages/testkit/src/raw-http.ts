import { connect, type Socket } from 'node:net';

/**
 * Writes `raw` (bytes an HTTP client library would refuse to send: no `Host`, a duplicated header, not HTTP at all) on
 * a new connection to 127.0.0.1:`port`, ends its side, and resolves with everything the server sent until it closed.
 *
 * @example
 * ```ts
 * const answer = await rawHttpExchange(port, 'GET /v1/endpoints HTTP/1.1\r\n\r\n');
 * answer.split('\r\n')[0]; // 'HTTP/1.1 400 Bad Request'
 * ```
 */
export function rawHttpExchange(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.end(raw));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

/** An upload the server refused (its answer read) whose client never sends the rest of what it declared. */
export interface StalledUpload extends AsyncDisposable {
  /** The answer's status code. */
  readonly status: number;
  /** Whether the connection has closed. */
  readonly closed: boolean;
  /** Resolves once the connection closed: by the server, as the client ends it only when disposed. */
  readonly serverClosed: Promise<void>;
  readonly socket: Socket;
}

/**
 * POSTs a JSON body declaring `declaredBytes` to 127.0.0.1:`port`, sends only `sent` of it, reads the whole answer
 * (by its `content-length`) and leaves the connection open, the rest of the body never sent.
 *
 * @example
 * ```ts
 * await using upload = await openStalledUpload(port, { path: '/v1/endpoints/items/query', declaredBytes: 100_000, sent: '{' });
 * upload.status; // 413
 * ```
 */
export async function openStalledUpload(
  port: number,
  request: { path: string; declaredBytes: number; sent: string; headers?: Record<string, string> },
): Promise<StalledUpload> {
  const socket = connect(port, '127.0.0.1');
  let closed = false;
  const serverClosed = new Promise<void>((resolve) => {
    socket.once('close', () => {
      closed = true;
      resolve();
    });
  });
  // A reset from the server at shutdown is the server closing; the test reads `closed`.
  socket.on('error', () => {});
  const extra = Object.entries(request.headers ?? {})
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  socket.write(
    `POST ${request.path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n${extra}` +
      `content-length: ${request.declaredBytes}\r\n\r\n${request.sent}`,
  );
  const status = await new Promise<number>((resolve, reject) => {
    let received = '';
    const onData = (chunk: Buffer) => {
      received += chunk.toString('utf8');
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = /\r\ncontent-length: (\d+)\r\n/i.exec(received.slice(0, end + 2));
      if (length === null || Buffer.byteLength(received.slice(end + 4)) < Number(length[1])) return;
      socket.off('data', onData);
      resolve(Number(/^HTTP\/1\.1 (\d{3}) /.exec(received)?.[1] ?? 0));
    };
    socket.on('data', onData);
    void serverClosed.then(() => reject(new Error(`the connection closed before the answer: ${received}`)));
  });
  return {
    status,
    get closed() {
      return closed;
    },
    serverClosed,
    socket,
    [Symbol.asyncDispose]: async () => {
      socket.destroy();
      await serverClosed;
    },
  };
}
