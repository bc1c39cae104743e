/**
 * Runs a large file through a deliberately slow sink and reports memory. argv[2] = file path.
 * Prints `RESULT <json>`: records written, RSS at warm-up and its peak after, and the most records the
 * source had produced beyond what the sink had taken (which backpressure bounds to about one batch).
 */
import { setTimeout as delay } from 'node:timers/promises';
import { BadRecordCollector } from '../bad-records.js';
import { runPipeline } from '../run.js';
import { createFileSource } from '../sources/file.js';
import type { PipelineSink, PipelineSource } from '../types.js';

const path = process.argv[2]!;
let produced = 0;
let consumed = 0;
let maxAhead = 0;
const inner = createFileSource({ handle: 'big.source', path, format: 'jsonl' });
const source: PipelineSource = {
  ...inner,
  async *read(from, options) {
    for await (const item of inner.read(from, options)) {
      if (item.kind === 'records') produced += item.ops.length;
      maxAhead = Math.max(maxAhead, produced - consumed);
      yield item;
    }
  },
};
const sink: PipelineSink = {
  handle: 'slow.sink',
  description: { type: 'slow' },
  keyFields: ['id'],
  keepsCheckpoint: false,
  committed: async () => null,
  prepare: async () => {},
  async write(ops) {
    await delay(2); // slower than the source
    consumed += ops.length;
  },
  commit: async () => {},
  finish: async () => {},
  close: async () => {},
};

const samples: number[] = [];
const sampler = setInterval(() => samples.push(process.memoryUsage().rss), 50);
const result = await runPipeline({
  name: 'backpressure',
  dag: 'test',
  branches: [{ source, processors: [] }],
  sink,
  mode: 'transfer',
  plan: { decision: 'from-scratch', reason: 'test', checkpoint: null },
  badRecords: new BadRecordCollector('fail'),
  signal: new AbortController().signal,
  commitEveryRecords: 50_000,
  batchSize: 1_000,
});
clearInterval(sampler);
const warm = Math.max(1, Math.floor(samples.length / 10));
const warmRss = Math.max(...samples.slice(0, warm));
const peakRss = Math.max(...samples);
process.stdout.write(
  `RESULT ${JSON.stringify({ written: result.progress.recordsWritten, warmRss, peakRss, maxAhead, samples: samples.length })}\n`,
);
