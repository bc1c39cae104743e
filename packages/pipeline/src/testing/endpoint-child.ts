/**
 * A child process running one endpoint pipeline (tests SIGKILL it mid-snapshot). argv[2] = JSON
 * `{ root, endpoint, commitEveryRecords, fileChunkBytes }`. Prints `DECISION <decision> <reason>`,
 * `EPOCH <n>` after each commit, and `SERVING <cache>` once the alias points at a complete generation.
 */
import { openCacheManager } from '@sluice/cache';
import { startEndpointPipeline } from '../endpoint.js';

const input = JSON.parse(process.argv[2]!);
const caches = await openCacheManager(input.root);
let epoch = -1;
const pipeline = await startEndpointPipeline(input.endpoint, {
  caches,
  events: {
    publish: async (event) => {
      process.stdout.write(`EVENT ${JSON.stringify(event)}\n`);
    },
  },
  connections: {},
  commitEveryRecords: input.commitEveryRecords ?? 500,
  commitEveryMs: 60_000,
  ...(input.fileChunkBytes ? { fileChunkBytes: input.fileChunkBytes } : {}),
  onProgress: (p) => {
    if (p.epoch !== epoch) {
      epoch = p.epoch;
      process.stdout.write(`EPOCH ${epoch}\n`);
    }
  },
});
process.stdout.write(`DECISION ${pipeline.decision.decision} ${pipeline.decision.reason}\n`);
const cache = await pipeline.whenServing({ timeoutMs: 120_000 });
process.stdout.write(`SERVING ${cache}\n`);
await pipeline.stop();
await caches.close();
process.exit(0);
