/**
 * A graceful shutdown finishes the requests in flight; a client that still owes the rest of the body of a request
 * already answered (a refused transfer submit) is not one of them, and must not hold the shutdown. A real app-server
 * process, a raw socket, SIGTERM.
 */
import { openStalledUpload, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';

describe('a refused upload at shutdown', () => {
  it('defect: a refused transfer submit whose client never sent the rest of its body kept the HTTP server from closing — the shutdown gave up on it after 2 s', async () => {
    await using dir = await tempDir('sluice-app-stalled-upload-');
    await using node = await startNodeProcess({
      ...localNode('stalled', dir.path),
      extraYaml: 'http: { bodyBytes: 16384 }',
    });
    // Declares 100,000 bytes, sends 11 and never the rest: answered 413 at once, the connection kept open to read
    // the rest (so that the answer is not reset away).
    await using upload = await openStalledUpload(node.port, {
      path: '/v1/transfers',
      declaredBytes: 100_000,
      sent: '{"id":"stal',
    });
    expect(upload.status).toBe(413);
    expect(upload.closed).toBe(false);

    node.child.kill('SIGTERM');
    const exit = await node.child.exited;
    expect(exit, node.child.output()).toEqual({ code: 0, signal: null });
    // The server closed the connection itself, at shutdown: the HTTP server's close finished, not given up on after
    // its 2 s step bound (node.ts logs that) with the connection still open …
    await upload.serverClosed;
    expect(node.child.lines.filter((line) => line.includes('shutdown step did not finish'))).toEqual([]);
    // … nor closed by the discard giving up on the rest of the body (which logs this).
    expect(node.child.lines.filter((line) => line.includes('rest of a refused body'))).toEqual([]);
    expect(node.child.output()).toContain('app-server stopped');
  }, 90_000);
});
