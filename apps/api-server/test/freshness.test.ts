import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveConfig } from '@sluice/core';
import { spawnTs, tempDir } from '@sluice/testkit';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { formatPositionHeader, parseMinPosition, positionReached } from '../src/freshness.js';
import { startApiServer } from '../src/index.js';

const WRITER = fileURLToPath(new URL('./fixtures/position-writer.ts', import.meta.url));

const checkpoint = (positions: Record<string, unknown>) => ({ dag: 'd', epoch: 1, positions, at: 'x' });

/** An api-server on `root` (any free port) whose `sluice-min-position` waits last up to `freshnessWaitMs`. */
function startServer(root: string, freshnessWaitMs: number) {
  return startApiServer({
    config: resolveConfig({ dataDir: root, logLevel: 'silent', api: { freshnessWaitMs } }),
    dataDir: root,
    port: 0,
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    watchMs: 50,
  });
}

describe('freshness headers (issue 16)', () => {
  it('formats sluice-position and parses sluice-min-position strictly', () => {
    const cp = checkpoint({ 'items.source': { lsn: '0/16B3748' }, 'items.cache': { written: 3 } });
    expect(formatPositionHeader(cp)).toBe('items.source="0/16B3748"');
    expect(formatPositionHeader(checkpoint({ 'items.source': { offset: 10 } }))).toBeNull();
    expect(positionReached(cp, parseMinPosition('0/16B3748'))).toBe(true);
    expect(positionReached(cp, parseMinPosition('0/16B3749'))).toBe(false);
    expect(positionReached(cp, parseMinPosition('items.source="0/1000"'))).toBe(true);
    expect(positionReached(cp, parseMinPosition('items.source="0/1000", other.source="0/1"'))).toBe(false);
    expect(positionReached(cp, parseMinPosition('items.source="1/0"'))).toBe(false); // 1/0 > 0/16B3748
    for (const bad of [
      '',
      'items.source=0/1',
      'Items.source="0/1"',
      'items.source="zz"',
      '0/',
      'x'.repeat(5000),
    ])
      expect(() => parseMinPosition(bad), bad).toThrow(/sluice-min-position/);
  });

  it('a wait for a position answers promptly once it is committed, with the record that commit wrote', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    await using writer = spawnTs(WRITER, ['--root', root, '--trigger', dir.path, '--lsns', '0/100,0/300']);
    await writer.waitForLine(/^READY /, 30_000);
    const server = await startServer(root, 10_000);
    try {
      // Record 1 is written by the commit at 0/300: asked for before that commit exists.
      const waiting = fetch(`${server.url}/v1/endpoints/items/records/1`, {
        headers: { 'sluice-min-position': '0/300' },
      }).then((response) => ({ response, at: performance.now() }));
      await new Promise((resolve) => setTimeout(resolve, 200));
      await writeFile(join(dir.path, 'go-1'), '');
      await writer.waitForLine(/^COMMITTED 0\/300/, 10_000);
      const committedAt = performance.now();
      const { response, at } = await waiting;
      expect(response.status).toBe(200);
      expect(response.headers.get('sluice-position')).toBe('items.source="0/300"');
      expect(await response.json()).toEqual({ id: 1 });
      // Woken by the commit, not by the 10 s wait running out (generous: the machine may be loaded).
      expect(at - committedAt).toBeLessThan(2_000);
    } finally {
      await server.close();
    }
  });

  it('defect: a position no source of the endpoint can ever reach (a polled source has no LSN; an unknown source) waited out freshnessWaitMs and answered 503 with retry-after, forever — now 400 at once', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const polled = join(dir.path, 'polled');
    const replicated = join(dir.path, 'replicated');
    await using pollWriter = spawnTs(WRITER, [
      '--root',
      polled,
      '--trigger',
      dir.path,
      '--lsns',
      '0/1',
      '--capture',
      'poll',
    ]);
    await using lsnWriter = spawnTs(WRITER, ['--root', replicated, '--trigger', dir.path, '--lsns', '0/100']);
    await pollWriter.waitForLine(/^READY /, 30_000);
    await lsnWriter.waitForLine(/^READY /, 30_000);
    const pollServer = await startServer(polled, 5_000);
    const lsnServer = await startServer(replicated, 5_000);
    try {
      for (const [server, header, reason] of [
        [pollServer, '0/0', 'no LSN position'],
        [pollServer, 'items.source="0/0"', 'no LSN position'],
        [lsnServer, 'other.source="0/1"', 'no source "other.source"'],
        [lsnServer, 'items.source="0/1", x="0/1"', 'no source "x"'],
      ] as const) {
        const started = Date.now();
        const response = await fetch(`${server.url}/v1/endpoints/items/records/0`, {
          headers: { 'sluice-min-position': header },
        });
        expect(response.status, header).toBe(400);
        const problem = (await response.json()) as {
          code: string;
          errors: Array<{ path: string; message: string }>;
        };
        expect(problem.code).toBe('VALIDATION_FAILED');
        expect(problem.errors[0]?.path).toBe('headers.sluice-min-position');
        expect(problem.errors[0]?.message).toContain(reason);
        // At once: not after the 5 s wait.
        expect(Date.now() - started, header).toBeLessThan(2_500);
      }
      // What each endpoint can reach still answers.
      const ok = await fetch(`${lsnServer.url}/v1/endpoints/items/records/0`, {
        headers: { 'sluice-min-position': 'items.source="0/100"' },
      });
      expect(ok.status).toBe(200);
      expect((await fetch(`${pollServer.url}/v1/endpoints/items/records/0`)).status).toBe(200);
    } finally {
      await pollServer.close();
      await lsnServer.close();
    }
  });

  it('defect: endpoint info and counts carried a sluice-position up to 50 ms older than the checkpoint they answered with (null before the first one), even below the sluice-min-position they had waited for', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    const lsns = ['0/100', '0/200', '0/300', '0/400', '0/500', '0/600'];
    await using writer = spawnTs(WRITER, ['--root', root, '--trigger', dir.path, '--lsns', lsns.join(',')]);
    await writer.waitForLine(/^READY /, 30_000);
    const server = await startServer(root, 10_000);
    try {
      // One reader asks for the endpoint's description back to back while the writer commits: every answer's header
      // must name the position its own body reports (the header is what a client keeps for read-your-writes).
      const mismatches: string[] = [];
      let answers = 0;
      let committing = true;
      const reader = (async () => {
        while (committing) {
          const response = await fetch(`${server.url}/v1/endpoints/items`);
          const body = (await response.json()) as { checkpoint: Parameters<typeof formatPositionHeader>[0] };
          const header = response.headers.get('sluice-position');
          const described = formatPositionHeader(body.checkpoint);
          answers++;
          if (header !== described) mismatches.push(`header ${header}, body ${described}`);
        }
      })();
      for (let i = 1; i < lsns.length; i++) {
        await writeFile(join(dir.path, `go-${i}`), '');
        await writer.waitForLine(new RegExp(`^COMMITTED ${lsns[i]}`), 10_000);
        // A count that waited for this commit answers with (at least) its position.
        const count = await fetch(`${server.url}/v1/endpoints/items/count`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'sluice-min-position': lsns[i]! },
          body: '{}',
        });
        expect(count.status).toBe(200);
        expect(count.headers.get('sluice-position')).toBe(`items.source="${lsns[i]}"`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      committing = false;
      await reader;
      expect(answers).toBeGreaterThan(lsns.length);
      expect(mismatches).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it('a read with sluice-min-position waits for the commit, times out with 503 POSITION_NOT_REACHED', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    await using writer = spawnTs(WRITER, ['--root', root, '--trigger', dir.path, '--lsns', '0/100,0/300']);
    const cacheName = (await writer.waitForLine(/^READY /, 30_000)).split(' ')[1]!;
    const server = await startServer(root, 1_500);
    try {
      const get = (headers: Record<string, string> = {}) =>
        fetch(`${server.url}/v1/endpoints/items/records/0`, { headers });
      const plain = await get();
      expect(plain.status).toBe(200);
      expect(plain.headers.get('sluice-cache')).toBe(cacheName);
      expect(plain.headers.get('sluice-position')).toBe('items.source="0/100"');

      // Asked for 0/200: not answered while the generation is at 0/100, answered once 0/300 is committed.
      let answered = false;
      const waiting = get({ 'sluice-min-position': 'items.source="0/200"' }).then((r) => {
        answered = true;
        return r;
      });
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(answered).toBe(false);
      await writeFile(join(dir.path, 'go-1'), '');
      const fresh = await waiting;
      expect(fresh.status).toBe(200);
      expect(fresh.headers.get('sluice-position')).toBe('items.source="0/300"');
      // A bare position names the only source.
      expect((await get({ 'sluice-min-position': '0/300' })).status).toBe(200);

      const started = Date.now();
      const late = await get({ 'sluice-min-position': '0/900' });
      const waited = Date.now() - started;
      expect(late.status).toBe(503);
      expect(late.headers.get('retry-after')).toBe('2');
      const problem = (await late.json()) as { code: string; detail: string };
      expect(problem.code).toBe('POSITION_NOT_REACHED');
      expect(problem.detail).toContain('items.source="0/300"');
      expect(waited).toBeGreaterThanOrEqual(1_400);

      const bad = await fetch(`${server.url}/v1/endpoints/items/count`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'sluice-min-position': 'items.source=0/1' },
        body: '{}',
      });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { code: string }).code).toBe('VALIDATION_FAILED');
    } finally {
      await server.close();
    }
  });
});
