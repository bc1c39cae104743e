import { createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';

const CHILD = fileURLToPath(new URL('../test/fixtures/backpressure-child.ts', import.meta.url));
const RECORDS = 1_000_000;

async function writeBigFile(path: string) {
  const out = createWriteStream(path);
  const chunk: string[] = [];
  for (let i = 0; i < RECORDS; i++) {
    chunk.push(
      `{"id":${i},"name":"record-${i}","value":${i % 1000},"tags":["a","b"],"pad":"${'x'.repeat(40)}"}\n`,
    );
    if (chunk.length === 10_000) {
      if (!out.write(chunk.join(''))) await new Promise<void>((r) => out.once('drain', () => r()));
      chunk.length = 0;
    }
  }
  out.end(chunk.join(''));
  await new Promise<void>((r) => out.once('finish', () => r()));
}

describe('backpressure', () => {
  it('keeps memory flat reading a large file into a slow sink', { timeout: 90_000 }, async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'big.jsonl');
    await writeBigFile(path);
    const size = (await stat(path)).size;
    expect(size).toBeGreaterThan(90 * 1024 * 1024);
    // A small heap: without backpressure the file's records could never fit and the child would die.
    await using child = spawnTs(CHILD, [path], { env: { NODE_OPTIONS: '--max-old-space-size=64' } });
    const line = await child.waitForLine(/^RESULT /, 80_000);
    const result = JSON.parse(line.slice(7)) as {
      written: number;
      warmRss: number;
      peakRss: number;
      maxAhead: number;
    };
    expect(result.written).toBe(RECORDS);
    // The source never runs more than a batch or two ahead of the sink.
    expect(result.maxAhead).toBeLessThanOrEqual(2_000);
    // RSS after warm-up stays within a small margin, far below the file's size.
    expect(result.peakRss - result.warmRss).toBeLessThan(48 * 1024 * 1024);
    console.info('backpressure', { ...result, size });
  });
});
