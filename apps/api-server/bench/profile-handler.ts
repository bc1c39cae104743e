/**
 * CPU per request of the query and lookup handlers' own work, in process (no HTTP): core's `parseQuery` of the
 * parsed body, the cursor unwrap, the row-filter merge, `queryJson` (framed: the body) — what the api-server does
 * between fastify handing it the body and the reply being sent — and the fast lookup route (src/fast-lookup.ts:
 * path match, lease, key parse, read, headers, metrics; the response's writeHead/end replaced by no-ops). Same
 * data and queries as `bench/run.ts`.
 *   node --conditions=@sluice/source --import tsx bench/profile-handler.ts [records] [calls]   (add --cpu-prof)
 *   ONLY=query|lookup …                                                                         one kind only
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { andFilters, DEFAULT_QUERY_LIMITS, parseQuery } from '@sluice/core';
import { checkpointStamps } from '../src/checkpoint-headers.js';
import { unwrapCursor } from '../src/cursor.js';
import { endpointAccess } from '../src/endpoint-access.js';
import { fastLookupRoute } from '../src/fast-lookup.js';
import { createMetrics } from '../src/metrics.js';
import { pageFrame } from '../src/page-body.js';
import { recordReader } from '../src/record-read.js';
import { EndpointRegistry } from '../src/registry.js';
import { requestRecorder } from '../src/request-metrics.js';
import { createItemsGeneration } from './items-generation.js';

const RECORDS = Number(process.argv[2] ?? 200_000);
const CALLS = Number(process.argv[3] ?? 20_000);
const ONLY = process.env.ONLY;
const dir = mkdtempSync(join(tmpdir(), 'sluice-api-profile-'));
try {
  await using manager = await openCacheManager(join(dir, 'c'));
  const cache = await createItemsGeneration(manager, RECORDS);
  const limits = DEFAULT_QUERY_LIMITS;
  const generation = cache.name;
  let sink = 0;
  const run = (calls: number) => {
    for (let i = 0; i < calls; i++) {
      const from = (i * 7717) % Math.floor(RECORDS * 0.9);
      const body = JSON.parse(
        `{"$filter":{"value":{"$gte":${from}}},"$order_by":{"value":"asc"},"$limit":50}`,
      );
      const query = parseQuery(body, limits);
      if (query.after !== null) query.after = unwrapCursor(query.after, generation);
      query.filter = andFilters(query.filter, undefined);
      const page = cache.queryJson(query, pageFrame(generation));
      sink += page.json.length + (page.state ? 1 : 0);
    }
  };
  if (ONLY !== 'lookup') run(Math.min(CALLS, 5_000)); // warm up
  for (let round = 0; round < 3 && ONLY !== 'lookup'; round++) {
    const cpu = process.cpuUsage();
    run(CALLS);
    const used = process.cpuUsage(cpu);
    console.log(`query handler work: ${((used.user + used.system) / CALLS).toFixed(1)} µs CPU per call`);
  }
  const lookups = (calls: number) => {
    for (let i = 0; i < calls; i++) {
      const state = cache.servingState();
      const bytes = cache.getJson([1 + ((i * 7717) % RECORDS)]);
      sink += (bytes?.length ?? 0) + (state ? 1 : 0);
    }
  };
  if (ONLY !== 'query') lookups(20_000);
  if (ONLY !== 'query') {
    const cpu = process.cpuUsage();
    lookups(CALLS * 5);
    const used = process.cpuUsage(cpu);
    console.log(
      `lookup (servingState + getJson): ${((used.user + used.system) / (CALLS * 5)).toFixed(2)} µs CPU per call (${sink})`,
    );
  }
  await manager.redirect('items', cache.name);
  await cache.close();
  if (ONLY !== 'query') {
    await using registry = await EndpointRegistry.start({
      caches: manager,
      host: 'local',
      reconcileMs: 600_000,
    });
    const fast = fastLookupRoute({
      registry,
      access: endpointAccess({ registry, authenticator: null, freshnessWaitMs: 100, limits }),
      readRecord: recordReader(limits),
      headersOf: checkpointStamps().headersOf,
      record: requestRecorder(registry, createMetrics({ defaultMetrics: false })),
      cors: false,
      isStopping: () => false,
    });
    // Stands in for the socket: what a response would send is only counted.
    const response = {
      writeHead: (_status: number, headers: string[]) => {
        sink += headers.length;
      },
      end: (body: Buffer) => {
        sink += body.length;
      },
    } as unknown as ServerResponse;
    const requests = Array.from(
      { length: 1_000 },
      (_, i) =>
        ({
          method: 'GET',
          url: `/v1/endpoints/items/records/${1 + ((i * 7717) % RECORDS)}`,
          headers: {},
        }) as IncomingMessage,
    );
    const lookups = (calls: number) => {
      for (let i = 0; i < calls; i++)
        if (!fast(requests[i % requests.length]!, response)) throw new Error('the fast route left a lookup');
    };
    lookups(20_000);
    for (let round = 0; round < 3; round++) {
      const cpu = process.cpuUsage();
      lookups(CALLS * 5);
      const used = process.cpuUsage(cpu);
      console.log(
        `fast lookup route: ${((used.user + used.system) / (CALLS * 5)).toFixed(2)} µs CPU per call (${sink})`,
      );
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
