/**
 * An owner cut off from NATS (a partition: the server and the other nodes carry on) for longer than a lease while it
 * keeps running its transfers: a resend to another node takes them over on the definite "nobody" it hears, and the
 * fence keeps the owner that is still writing from landing anything after that.
 */
import { join } from 'node:path';
import {
  createTestDatabase,
  sleep,
  sql,
  startNatsServer,
  startTcpProxy,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  createCountedDestination,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const RECORDS = 4_000;

describe('an owner partitioned from NATS', () => {
  it('an owner cut off from NATS longer than a lease while writing: every record written once, file and PostgreSQL', {
    timeout: 180_000,
  }, async () => {
    await using store = await createTestDatabase('sluice_app_partition');
    await using dst = await createTestDatabase('sluice_app_partition_dst');
    // Every committed physical write into dst is counted: a replayed or duplicated write would show.
    const writes = await createCountedDestination(dst.url);
    await using nats = await startNatsServer();
    await using proxy = await startTcpProxy(nats.port);
    await using dir = await tempDir('sluice-partition-');
    const files = join(dir.path, 'files');
    const spec = (nodeId: string, natsUrl: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: store.url,
      nats: natsUrl,
      roots: [files],
      extraYaml: `connections: { wh: { type: postgres, url: "${dst.url}" } }`,
    });
    await using owner = await startNodeProcess(spec('n1', proxy.url));
    await using other = await startNodeProcess(spec('n2', nats.url));
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const toFile = fileTransfer('part-file', source, join(files, 'out.jsonl'), 400);
    const toTable = {
      ...fileTransfer('part-pg', source, join(files, 'unused.jsonl'), 400),
      destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
    };
    expect((await call(`${owner.url}/v1/transfers`, { json: toFile })).status).toBe(201);
    expect((await call(`${owner.url}/v1/transfers`, { json: toTable })).status).toBe(201);
    await waitFor(
      async () => {
        for (const id of ['part-file', 'part-pg']) {
          const reply = await call(`${owner.url}/v1/transfers/${id}`);
          if (!((reply.body.progress?.recordsRead ?? 0) > 300)) return false;
        }
        return true;
      },
      { timeoutMs: 30_000, what: 'both transfers to be under way' },
    );

    await proxy.cut();
    try {
      await waitFor(async () => (await call(`${owner.url}/readyz`)).status === 503, {
        timeoutMs: 20_000,
        what: 'the owner to see its backplane down',
      });
      // Longer than a lease: the owner keeps heartbeating through PostgreSQL and keeps writing.
      await sleep(FAST_TRANSFERS.leaseMs * 2);
      // The other node hears a definite "nobody" (the owner's responder is unreachable): it may take over at once
      // (docs/coordinator.md § Owner changes); the fence, not the lookup, must keep the owner from landing anything.
      for (const body of [toFile, toTable]) {
        const resend = await call(`${other.url}/v1/transfers`, { json: body });
        expect(resend.status, JSON.stringify(resend.body)).toBe(202);
      }
      await sleep(FAST_TRANSFERS.leaseMs * 2);
    } finally {
      await proxy.restore();
    }
    for (const id of ['part-file', 'part-pg']) {
      const done = await waitForState(other.url, id, 'COMPLETED', 90_000).catch((err) => {
        for (const n of [owner, other]) console.log(n.nodeId, n.child.output().slice(-6000));
        throw err;
      });
      expect(done.result, id).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    }
    expect(await exactlyOnce(join(files, 'out.jsonl'), RECORDS)).toBeNull();
    const [rows] = await sql(dst.url, 'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst');
    expect(rows).toEqual({ n: RECORDS, d: RECORDS });
    expect(await writes.counts()).toEqual({ n: RECORDS, d: RECORDS });
  });
});
