/**
 * A child process running one endpoint over a replication source until it is killed (tests SIGKILL it
 * mid-stream). argv[2] = JSON `{ root, url, endpoint, nodeId }`. Prints `DECISION <decision> <reason>`,
 * `SERVING <cache>`, and `EPOCH <n>` after each commit.
 */
import { openCacheManager } from '@sluice/cache';
import { startEndpointPipeline } from '../endpoint.js';

const input = JSON.parse(process.argv[2]!);
const caches = await openCacheManager(input.root);
let epoch = -1;
const pipeline = await startEndpointPipeline(input.endpoint, {
  caches,
  events: { publish: async () => {} },
  connections: { db: { type: 'postgres', url: input.url } },
  nodeId: input.nodeId,
  commitEveryMs: 20,
  retryMs: 100,
  replication: { keepaliveMs: 200 },
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
process.on('SIGTERM', () => {
  void pipeline.stop().then(async () => {
    await caches.close();
    process.exit(0);
  });
});
setInterval(() => {
  const status = pipeline.status();
  if (status.error) process.stdout.write(`ERROR ${status.error.code} ${status.error.message}\n`);
}, 500);
