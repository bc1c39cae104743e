import { connect } from 'node:net';
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { spawnApiServer, writeConfig } from './helpers.js';
import { applyFeed, queryAll, SseConnection } from './sse.js';

describe('change feeds under load', () => {
  it('1 000 concurrent subscribers on one api-server process each converge on the endpoint', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      // The 1 000 subscribers are one client (this process's one address): allowed past the default of 100.
      api: { changes: { heartbeatMs: 5_000, maxPerClient: 1_000 } },
    });
    await using api = await spawnApiServer(configPath);
    const subscribers: SseConnection[] = [];
    for (let batch = 0; batch < 10; batch += 1) {
      const opened = await Promise.all(
        Array.from({ length: 100 }, () => SseConnection.open(`${api.url}/v1/endpoints/items/changes`)),
      );
      subscribers.push(...opened);
    }
    await waitFor(() => subscribers.every((s) => s.events.some((e) => e.event === 'live')), {
      timeoutMs: 60_000,
      what: 'every subscriber live',
    });
    for (let c = 0; c < 3; c += 1)
      await writer.run({ op: 'commit', ops: [upsert(item(100 + c, 2)), upsert(item(c + 1, 3))] });
    await waitFor(() => subscribers.every((s) => s.events.filter((e) => e.event === 'commit').length === 3), {
      timeoutMs: 60_000,
      what: 'three commits at every subscriber',
    });
    const { records } = await queryAll(api.url, 'items');
    expect(records.size).toBe(53);
    let converged = 0;
    for (const subscriber of subscribers) {
      expect(applyFeed(subscriber.events)).toEqual(records);
      converged += 1;
      expect(subscriber.closed).toBe(false);
    }
    expect(converged).toBe(1000);
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    expect(metrics).toMatch(/^sluice_api_change_subscribers 1000$/m);
    // Graceful shutdown with 1 000 feeds open: every stream is ended and the process exits 0.
    const exit = await api.child.stop('SIGTERM', 15_000);
    expect(exit).toEqual({ code: 0, signal: null });
    await waitFor(() => subscribers.every((s) => s.closed), { what: 'every feed ended by the shutdown' });
  }, 180_000);

  it('a subscriber that stops reading is cut off once its buffer fills; the others get every event and heartbeats', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    // Its own process, as in production: the readers here must not share the server's event loop.
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { changes: { bufferBytes: 2 * 1024 * 1024, heartbeatMs: 200 } },
    });
    await using api = await spawnApiServer(configPath);
    const readers = await Promise.all(
      [1, 2].map(() => SseConnection.open(`${api.url}/v1/endpoints/items/changes`)),
    );
    // The non-reader: a raw socket that sends the request and never reads a byte.
    const { port } = new URL(api.url);
    const stalled = connect(Number(port), '127.0.0.1');
    let stalledClosed = false;
    stalled.on('close', () => {
      stalledClosed = true;
    });
    stalled.on('error', () => {});
    stalled.write('GET /v1/endpoints/items/changes HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n');
    stalled.pause();
    await waitFor(() => readers.every((r) => r.events.some((e) => e.event === 'live')), {
      what: 'readers live',
    });
    await waitFor(
      async () => /sluice_api_change_subscribers 3/.test(await (await fetch(`${api.url}/metrics`)).text()),
      {
        what: 'three subscribers',
      },
    );

    // ~24 MB of changes: far more than the socket buffers and the 2 MiB allowance of the stalled subscriber.
    const commits = 60;
    await writer.run({ op: 'stream', commits, perCommit: 40, everyMs: 100, from: 1000, gen: 7, pad: 10_000 });
    await waitFor(
      () => readers.every((r) => r.closed || r.events.filter((e) => e.event === 'commit').length === commits),
      {
        timeoutMs: 60_000,
        what: 'every commit at both readers',
      },
    );
    expect(readers.map((r) => r.closed)).toEqual([false, false]);
    const metrics = await waitFor(
      async () => {
        const text = await (await fetch(`${api.url}/metrics`)).text();
        return /^sluice_api_change_subscribers 2$/m.test(text) ? text : null;
      },
      { timeoutMs: 30_000, what: 'the stalled subscriber cut off' },
    );
    expect(metrics).toMatch(/^sluice_api_change_cutoffs_total 1$/m);
    // The server closed its end: once the stalled client reads again it reaches the end of the stream.
    expect(stalledClosed).toBe(false);
    stalled.resume();
    await waitFor(() => stalledClosed, {
      timeoutMs: 30_000,
      what: 'the stalled socket closed by the server',
    });
    const { records } = await queryAll(api.url, 'items');
    for (const reader of readers) {
      expect(reader.closed).toBe(false);
      expect(applyFeed(reader.events)).toEqual(records);
      expect(reader.comments).toBeGreaterThan(0);
    }
    // Still live after the cut-off.
    await writer.run({ op: 'commit', ops: [upsert(item(1, 9))] });
    for (const reader of readers)
      await reader.waitForEvent((e) => e.event === 'commit', { count: commits + 1 });
    for (const reader of readers) reader.kill();
    stalled.destroy();
  }, 120_000);
});
