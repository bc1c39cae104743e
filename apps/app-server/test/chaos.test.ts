/**
 * The chaos checker's own tests. The chaos run itself (chaos/driver.ts) is a command:
 * `pnpm --filter @sluice/app-server chaos` (200 transfers), or `… chaos --transfers 30 --seconds 40` in CI's
 * size. It is not part of `pnpm test` while issue 13 is open: it still finds PostgreSQL destinations where one
 * transaction writes a key's last version twice after a takeover (see the note).
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, startNatsServer, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Destinations } from '../chaos/destinations.js';
import { WireNats } from '../chaos/nats-wire.js';
import { Rng } from '../chaos/options.js';
import { planTransfers, type SourceRecord, writeSources } from '../chaos/workload.js';

/**
 * The checker itself must be able to fail: a faithful copy passes, and one replayed record — the defect the run
 * hunts — is reported and moves the destination's sample, for each kind of destination.
 */
describe('chaos checker', () => {
  it('a faithful copy passes; one replayed record fails, for file, PostgreSQL and JetStream', async () => {
    await using dir = await tempDir('sluice-chaos-checker-');
    await using db = await createTestDatabase('sluice_chaos_checker');
    await using nats = await startNatsServer();
    const rng = new Rng(7);
    const sources = await writeSources(join(dir.path, 'in'), rng);
    const [file, table, stream] = planTransfers(3, sources, dir.path, rng);
    await using destinations = await Destinations.prepare(db.url, nats.port, [file!, table!, stream!]);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await using _client = { [Symbol.asyncDispose]: () => client.end() };
    await using wire = await WireNats.connect(nats.port);
    const upsert = (r: SourceRecord) =>
      client.query(
        `INSERT INTO ${table!.target} (id, v, note) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note`,
        [r.id, r.v, r.note],
      );
    await writeFile(file!.target, `${file!.source.lines.join('\n')}\n`);
    for (const r of table!.source.records) await upsert(r);
    for (const r of stream!.source.records) await wire.publish(stream!.target, r);

    for (const spec of [file!, table!, stream!])
      expect(await destinations.verifyCompleted(spec), spec.kind).toEqual([]);
    const before = await Promise.all([file!, table!, stream!].map((s) => destinations.sample(s)));

    // A stale owner replays one record after the copy was complete.
    await appendFile(file!.target, `${file!.source.lines[0]}\n`);
    await upsert(table!.source.records[0]!);
    await wire.publish(stream!.target, stream!.source.records[0]);

    for (const spec of [file!, table!, stream!])
      expect((await destinations.verifyCompleted(spec)).join('\n'), spec.kind).toMatch(/keys wrong|lines/);
    const after = await Promise.all([file!, table!, stream!].map((s) => destinations.sample(s)));
    for (const [i, sample] of after.entries()) expect(sample).not.toBe(before[i]);
  });
});
