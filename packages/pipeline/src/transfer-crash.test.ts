import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type { DestinationAddress, TransferRequest } from '@sluice/core';
import { createTestDatabase, spawnTs, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';

const CHILD = fileURLToPath(new URL('./testing/transfer-child.ts', import.meta.url));
const RECORDS = 10_000;

async function writeSource(path: string) {
  const lines: string[] = [];
  for (let i = 0; i < RECORDS; i++) lines.push(JSON.stringify({ id: i, name: `n${i}`, value: i % 97 }));
  await writeFile(path, `${lines.join('\n')}\n`);
}

/**
 * Runs the transfer in a child process, SIGKILLs it at a random commit (plus a random few ms) `kills`
 * times, then lets it finish; returns the last run's DONE line.
 */
async function killAndResume(
  input: Record<string, unknown>,
  kills: number,
): Promise<Record<string, unknown>> {
  const arg = JSON.stringify(input);
  const epochs = Math.floor(RECORDS / (input.commitEveryRecords as number));
  let finished = false;
  for (let k = 0; k < kills; k++) {
    await using child = spawnTs(CHILD, [arg]);
    const target = 1 + Math.floor(Math.random() * Math.max(1, Math.floor(epochs / (kills + 1))));
    let exitedEarly = false;
    void child.exited.then(() => {
      exitedEarly = true;
    });
    // The target-th commit of this run (epochs continue across runs).
    await waitFor(() => exitedEarly || child.lines.filter((l) => l.startsWith('COMMIT ')).length >= target, {
      timeoutMs: 60_000,
      intervalMs: 2,
      what: `commit ${target}`,
    });
    await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 15)));
    child.kill('SIGKILL');
    const exit = await child.exited;
    // Finished before the kill landed: there is nothing left to resume (a finished file sink has published its
    // file, so its checkpoint no longer names a temp file and a rerun starts over).
    if (exit.code === 0 || child.lines.some((l) => l.startsWith('DONE '))) {
      finished = true;
      break;
    }
  }
  await using last = spawnTs(CHILD, [arg]);
  const done = await last.waitForLine(/^(DONE|FAILED) /, 90_000);
  expect(done).toMatch(/^DONE /);
  // The decision line names the reason when it is not a resume.
  if (!finished)
    expect(last.lines.filter((l) => l.startsWith('DECISION '))).toEqual([
      expect.stringMatching(/^DECISION resume /),
    ]);
  return JSON.parse(done.slice(5)) as Record<string, unknown>;
}

function request(id: string, source: string, destination: DestinationAddress): TransferRequest {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'file', path: source, format: 'jsonl' },
    destination,
    properties: {},
    // Paced (10 000 records in ≥ 0.5 s) so that a kill a few ms after a commit lands mid-run, even when this
    // process is slow to notice the commit.
    options: { onBadRecord: 'skip', maxRecordsPerSecond: 20_000 },
  };
}

describe('transfers killed with SIGKILL and resumed write each record exactly once', () => {
  it('file sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    const src = join(dir.path, 'in.jsonl');
    const out = join(dir.path, 'out.jsonl');
    await writeSource(src);
    const result = await killAndResume(
      {
        request: request('crash-file', src, { type: 'file', path: out, format: 'jsonl' }),
        checkpointFile: join(dir.path, 'checkpoint.json'),
        commitEveryRecords: 500,
        fileChunkBytes: 16_384,
      },
      2,
    );
    expect(result.recordsWritten).toBe(RECORDS);
    const ids = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { id: number }).id);
    expect(ids).toEqual(Array.from({ length: RECORDS }, (_, i) => i));
  });

  it('postgres sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    await using db = await createTestDatabase('sluice_pipeline_crash');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query('CREATE TABLE dst (id integer PRIMARY KEY, name text, value integer)');
      const src = join(dir.path, 'in.jsonl');
      await writeSource(src);
      const result = await killAndResume(
        {
          request: request('crash-pg', src, { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' }),
          checkpointFile: join(dir.path, 'checkpoint.json'),
          connections: { wh: { type: 'postgres', url: db.url } },
          commitEveryRecords: 500,
          fileChunkBytes: 16_384,
        },
        2,
      );
      expect(result.recordsWritten).toBe(RECORDS);
      const stats = await client.query(
        'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, min(id) AS lo, max(id) AS hi FROM dst',
      );
      expect(stats.rows[0]).toEqual({ n: RECORDS, d: RECORDS, lo: 0, hi: RECORDS - 1 });
    } finally {
      await client.end();
    }
  });

  it('jetstream sink', { timeout: 120_000 }, async () => {
    await using dir = await tempDir();
    await using nats = await startNatsServer();
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'OUT', subjects: ['out.>'], duplicate_window: 120_000_000_000 });
      const src = join(dir.path, 'in.jsonl');
      await writeSource(src);
      const result = await killAndResume(
        {
          request: request('crash-js', src, {
            type: 'jetstream',
            stream: 'OUT',
            subject: 'out.items',
            key: 'id',
          }),
          checkpointFile: join(dir.path, 'checkpoint.json'),
          nats: nats.url,
          commitEveryRecords: 500,
          fileChunkBytes: 16_384,
        },
        2,
      );
      expect(result.recordsWritten).toBe(RECORDS);
      const info = await jsm.streams.info('OUT');
      expect(info.state.messages).toBe(RECORDS);
    } finally {
      await nc.close();
    }
  });
});
