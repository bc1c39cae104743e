import { connect } from 'node:net';

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
