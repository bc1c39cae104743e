/**
 * Requests that can never run are bad input: refused at submit with 400 VALIDATION_FAILED and the failing path,
 * writing nothing — not accepted (201), stored, and then FAILED by the pipeline, nor run with a field silently
 * ignored, nor run over the file they read.
 */
import { existsSync, readFileSync } from 'node:fs';
import { symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess, writeRecords } from './helpers.js';

describe('request shape', { timeout: 90_000 }, () => {
  it('defect: requests that can never run were accepted (201) and stored, then FAILED or run with a field ignored — a query source without "key", a PostgreSQL destination with a "query", a destination "follow", a file copied onto itself', async () => {
    await using dir = await tempDir('sluice-request-shape-');
    await using node = await startNodeProcess({
      ...localNode('solo', dir.path),
      // Never reached: every request below must be refused before anything connects.
      extraYaml: 'connections: { db: { type: postgres, url: "postgres://nobody@127.0.0.1:1/none" } }',
    });
    const source = await writeRecords(join(dir.path, 'data', 'in.jsonl'), 5);
    const original = readFileSync(source, 'utf8');
    await symlink(source, join(dir.path, 'data', 'link.jsonl'));
    const file = (path: string, extra: Record<string, unknown> = {}) => ({
      type: 'file',
      path,
      format: 'jsonl',
      ...extra,
    });
    const out = join(dir.path, 'out', 'out.jsonl');
    const cases: Array<{ name: string; source: unknown; destination: unknown; path: string }> = [
      {
        name: 'query-without-key',
        source: { type: 'postgres', connection: 'db', query: 'select 1 as id' },
        destination: file(out),
        path: 'source.key',
      },
      {
        name: 'destination-query',
        source: file(source),
        destination: { type: 'postgres', connection: 'db', query: 'select 1', key: 'id' },
        path: 'destination.query',
      },
      {
        name: 'destination-follow',
        source: file(source),
        destination: file(out, { follow: true }),
        path: 'destination.follow',
      },
      {
        name: 'destination-capture',
        source: file(source),
        destination: { type: 'postgres', connection: 'db', table: 't', capture: 'replication' },
        path: 'destination.capture',
      },
      {
        name: 'onto-itself',
        source: file(source),
        destination: { type: 'file', path: source, format: 'csv' },
        path: 'destination.path',
      },
      {
        name: 'onto-itself-via-symlink',
        source: file(join(dir.path, 'data', 'link.jsonl')),
        destination: file(source),
        path: 'destination.path',
      },
    ];
    const answers: Record<string, string> = {};
    for (const c of cases) {
      const reply = await call(`${node.url}/v1/transfers`, {
        json: { id: c.name, mode: 'idempotent', source: c.source, destination: c.destination },
      });
      const paths = (reply.body?.errors ?? []).map((e: { path: string }) => e.path).join(',');
      answers[c.name] = `${reply.status} ${reply.body?.code ?? reply.body?.state} ${paths}`;
    }
    expect(answers).toEqual(
      Object.fromEntries(cases.map((c) => [c.name, `400 VALIDATION_FAILED ${c.path}`])),
    );
    // Nothing was written: no record, no output, and the source is intact.
    for (const c of cases) expect((await call(`${node.url}/v1/transfers/${c.name}`)).status).toBe(404);
    expect(existsSync(out)).toBe(false);
    expect(readFileSync(source, 'utf8')).toBe(original);
    // The same rules hold for fire-and-forget requests (never stored, so refused or run at once).
    const fire = await call(`${node.url}/v1/transfers`, {
      json: { id: 'ff', mode: 'fire-and-forget', source: file(source), destination: file(source) },
    });
    expect(fire.status).toBe(400);
    expect(readFileSync(source, 'utf8')).toBe(original);
  });
  it('defect: a fire-and-forget "follow" transfer was accepted (202) though nothing can ever stop it — terminate answers 404 (no record), it runs until the node shuts down', async () => {
    await using dir = await tempDir('sluice-request-shape-ff-');
    await using node = await startNodeProcess({
      ...localNode('solo', dir.path),
      // Never reached: the request must be refused before anything connects.
      extraYaml: 'connections: { db: { type: postgres, url: "postgres://nobody@127.0.0.1:1/none" } }',
    });
    const source = await writeRecords(join(dir.path, 'data', 'in.jsonl'), 5);
    const reply = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'ff-follow',
        mode: 'fire-and-forget',
        source: { type: 'file', path: source, format: 'jsonl', follow: true },
        destination: { type: 'postgres', connection: 'db', table: 't', key: 'id' },
        options: { follow: true },
      },
    });
    expect(reply.status, JSON.stringify(reply.body)).toBe(400);
    expect(reply.body.code).toBe('VALIDATION_FAILED');
    expect(reply.body.errors.map((e: { path: string }) => e.path)).toEqual(['options.follow']);
    // Nothing runs: no fire-and-forget transfer is left on the node.
    const metrics = await call(`${node.url}/metrics`);
    expect(String(metrics.body)).toMatch(/^sluice_transfers\{state="fire_and_forget"\} 0$/m);
    // The same request as an idempotent transfer is a transfer terminate can stop: accepted.
    const idempotent = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'ff-follow-idempotent',
        mode: 'idempotent',
        source: { type: 'file', path: source, format: 'jsonl', follow: true },
        destination: { type: 'postgres', connection: 'db', table: 't', key: 'id' },
        options: { follow: true },
      },
    });
    expect(idempotent.status, JSON.stringify(idempotent.body)).toBe(201);
    const stopped = await call(`${node.url}/v1/transfers/ff-follow-idempotent/terminate`, { method: 'POST' });
    expect(stopped.status).toBe(200);
    expect(stopped.body.state).toBe('TERMINATED');
  });
  it('defect: a fire-and-forget transfer reading logical replication was accepted (202), and a crash of its node left its slot and publication on the source for good (nothing records them to drop)', async () => {
    await using dir = await tempDir('sluice-request-shape-ff-slot-');
    await using node = await startNodeProcess({
      ...localNode('solo', dir.path),
      // Never reached: the request must be refused before anything connects (no slot is created).
      extraYaml: 'connections: { db: { type: postgres, url: "postgres://nobody@127.0.0.1:1/none" } }',
    });
    const reply = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'ff-replication',
        mode: 'fire-and-forget',
        source: { type: 'postgres', connection: 'db', table: 'items', capture: 'replication' },
        destination: { type: 'file', path: join(dir.path, 'out.jsonl'), format: 'jsonl' },
      },
    });
    expect(reply.status, JSON.stringify(reply.body)).toBe(400);
    expect(reply.body.code).toBe('VALIDATION_FAILED');
    expect(reply.body.errors.map((e: { path: string }) => e.path)).toEqual(['source.capture']);
    const metrics = await call(`${node.url}/metrics`);
    expect(String(metrics.body)).toMatch(/^sluice_transfers\{state="fire_and_forget"\} 0$/m);
  });
});
