/**
 * Two hosts sharing one nats-server: how long from host A's redirect (alias moved, `AliasRedirected` published)
 * until BOTH of host A's api-servers answer from the new generation, while host B rebuilds continuously and its
 * alias versions run ahead of A's. Prints every round and the median (goal: under 100 ms).
 *
 *   pnpm --filter @sluice/api-server bench:hosts [-- --rounds 20 --count 500]
 */
import { parseArgs } from 'node:util';
import { startNatsServer, waitFor } from '@sluice/testkit';
import { buildGeneration } from '../test/fixtures/data.js';
import { spawnApiServer, timeSwitch, writeConfig } from '../test/helpers.js';
import { startWriterHost } from '../test/writer-host.js';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '20' }, count: { type: 'string', default: '500' } },
});
const ROUNDS = Number(values.rounds);
const COUNT = Number(values.count);

async function main(): Promise<void> {
  await using nats = await startNatsServer();
  await using hostA = await startWriterHost(nats.url, { prefix: 'sluice-bench-host-a-', nodeId: 'app-a' });
  await using hostB = await startWriterHost(nats.url, { prefix: 'sluice-bench-host-b-', nodeId: 'app-b' });
  let genA = 1;
  await buildGeneration(hostA.manager, 'items', genA, COUNT, hostA.publisher, undefined, 'host-a');
  const config = await writeConfig(hostA.dir.path, {
    node: { id: 'host-a' },
    dataDir: hostA.dir.path,
    nats: nats.url,
    // Far away: a switch within a round can only be the event's.
    api: { reconcileMs: 600_000 },
  });
  const servers = await Promise.all([spawnApiServer(config), spawnApiServer(config)]);
  const urls = servers.map((s) => s.url);

  // Host B rebuilds all along (its counter ahead of A's after the first few rounds).
  let genB = 0;
  let stopB = false;
  const rebuildingB = (async () => {
    while (!stopB) {
      genB += 1;
      await buildGeneration(hostB.manager, 'items', genB, COUNT, hostB.publisher, undefined, 'host-b');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  await waitFor(() => genB >= 5, { timeoutMs: 30_000, what: 'host B to rebuild a few times' });

  const durations: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round += 1) {
      genA += 1;
      const ms = await timeSwitch(
        (onBuilt) => buildGeneration(hostA.manager, 'items', genA, COUNT, hostA.publisher, onBuilt, 'host-a'),
        urls,
        { timeoutMs: 30_000, intervalMs: 2, what: "both of host A's api-servers on A's new generation" },
      );
      durations.push(ms);
      console.log(`round ${round + 1}: ${ms.toFixed(1)} ms (host B at generation ${genB})`);
    }
    const metrics = await Promise.all(urls.map(async (u) => (await fetch(`${u}/metrics`)).text()));
    for (const [i, text] of metrics.entries()) {
      const lines = text
        .split('\n')
        .filter((l) => l.startsWith('sluice_api_switches_total{endpoint="items"'));
      console.log(`api-server ${i + 1}: ${lines.join('; ')}`);
    }
  } finally {
    stopB = true;
    await rebuildingB;
    for (const server of servers) await server[Symbol.asyncDispose]();
  }
  const sorted = [...durations].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  console.log(
    `event → both api-servers of host A serving, ${ROUNDS} rounds while host B rebuilt ${genB} times: median ${at(0.5).toFixed(1)} ms, p90 ${at(0.9).toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms`,
  );
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
