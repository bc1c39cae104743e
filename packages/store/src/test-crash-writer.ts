/**
 * Child process of the outage tests: a node that writes to the store as fast as it can until it is killed.
 * Usage: test-crash-writer.ts <store-url> <id-prefix>
 */
import { parseTransferRequest, requestHash } from '@sluice/core';
import { openStore } from './open.js';

const [url, prefix] = process.argv.slice(2);
if (!url || !prefix) throw new Error('usage: test-crash-writer.ts <store-url> <id-prefix>');
const store = await openStore(url, { poolSize: 2 });
const owner = { nodeId: 'crasher', address: 'http://crasher:7070', instanceId: `crasher-${process.pid}` };
console.log('ready');
for (let i = 0; ; i++) {
  const request = parseTransferRequest({
    id: `${prefix}-${i}`,
    source: { type: 'file', path: `/data/${i}.jsonl` },
    destination: { type: 'file', path: `/out/${i}.jsonl` },
    properties: { i, pad: 'p'.repeat(2_000) },
  });
  const { record } = await store.submit({
    request,
    requestHash: requestHash(request),
    owner,
    leaseMs: 60_000,
  });
  await store.transition(record.id, record.epoch, { to: 'IN_PROGRESS' });
  await store.saveCheckpoint(record.id, record.epoch, { i, blob: 'c'.repeat(20_000) }, 60_000);
  await store.heartbeat(owner, 60_000);
  console.log(`done ${i}`);
}
