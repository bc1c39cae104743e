import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { freeBasePort, startNatsServer, tempDir, testPostgresUrl, waitFor } from '@sluice/testkit';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildApps } from '../src/build.js';
import { repoRoot } from '../src/paths.js';
import { runScript, sh } from '../src/shell.js';

// examples/cluster as its README says: `run.sh start`, the printed curl commands, `run.sh status`, `run.sh stop`.
// Isolated from a developer's own run: a private nats-server, a database of its own, free ports, a temporary state
// directory (all through the variables run.sh documents).

interface City {
  id: number;
  name: string;
  country: string;
}

const NORDIC = ['DK', 'FI', 'IS', 'NO', 'SE'];
const script = join(repoRoot, 'examples/cluster/run.sh');

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('examples/cluster (three app-servers, two api-servers, PostgreSQL + NATS)', () => {
  beforeAll(() => buildApps(), 900_000);

  it('starts, runs a transfer once across nodes, serves the endpoint on both api-servers, reports status, stops', async () => {
    await using nats = await startNatsServer();
    await using state = await tempDir('sluice-e2e-cluster-');
    const server = new URL(testPostgresUrl());
    server.pathname = '';
    const database = `sluice_e2e_cluster_${randomBytes(4).toString('hex')}`;
    const base = await freeBasePort([1, 2, 3, 81, 82]);
    const env = {
      SLUICE_NATS_URL: nats.url,
      SLUICE_CLUSTER_PG: server.toString().replace(/\/$/, ''),
      SLUICE_CLUSTER_DB: database,
      SLUICE_CLUSTER_BASE_PORT: String(base),
      SLUICE_CLUSTER_STATE: join(state.path, 'cluster'),
    };
    const run = (command: string) => runScript(script, [command], { cwd: repoRoot, env });
    const databaseExists = async () =>
      (
        await sh(
          `psql "${env.SLUICE_CLUSTER_PG}/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '${database}'"`,
        )
      ).trim() === '1';

    try {
      const started = await run('start');
      expect(started.code, `${started.stdout}\n${started.stderr}`).toBe(0);
      expect(started.stdout).toContain(`created database ${database}`);
      expect(started.stdout).toContain(`api2 serving nordic-cities on http://127.0.0.1:${base + 82}`);
      expect(await databaseExists()).toBe(true);

      const commands = started.stdout.split('\n').filter((line) => line.startsWith('curl '));
      const [submitOnNode1, resendOnNode2, readOnNode3, query, count] = commands;
      expect(commands).toHaveLength(5);
      expect(submitOnNode1).toContain(`127.0.0.1:${base + 1}/v1/transfers`);
      expect(resendOnNode2).toContain(`127.0.0.1:${base + 2}/v1/transfers`);

      // The transfer: created on node1, the same request on node2 is not run again, node3 reports the outcome.
      const created = JSON.parse(await sh(submitOnNode1!, { cwd: repoRoot }));
      expect(created).toMatchObject({ id: 'cities-export-1', owner: { nodeId: 'node1' } });
      const resent = JSON.parse(await sh(resendOnNode2!, { cwd: repoRoot }));
      expect(resent.id).toBe('cities-export-1');
      expect(resent.owner?.nodeId).toBe('node1');
      const done = await waitFor(
        async () => {
          const record = JSON.parse(await sh(readOnNode3!));
          return record.state === 'COMPLETED' ? record : null;
        },
        { timeoutMs: 120_000, intervalMs: 250, what: 'cities-export-1 to complete' },
      );
      expect(done.result).toMatchObject({ recordsRead: 171_075, recordsWritten: 171_075 });
      expect(done.attempts).toBe(1);
      const output = readFileSync(join(env.SLUICE_CLUSTER_STATE, 'out/cities-export-1.jsonl'), 'utf8')
        .trimEnd()
        .split('\n');
      expect(output).toHaveLength(171_075);
      expect(new Set(output.map((line) => (JSON.parse(line) as City).id)).size).toBe(171_075);
      // Sent once more after completion: the stored outcome (200), still one attempt.
      const again = JSON.parse(await sh(resendOnNode2!));
      expect(again).toMatchObject({ state: 'COMPLETED', attempts: 1 });

      // The endpoint, on both api-servers (each reads its own host's cache).
      const cities = readFileSync(join(repoRoot, 'examples/quickstart/data/cities.jsonl'), 'utf8')
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as City)
        .filter((city) => NORDIC.includes(city.country));
      const page = JSON.parse(await sh(query!));
      expect(page.records).toEqual(
        cities
          .filter((c) => c.country === 'IS')
          .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id))
          .slice(0, 5),
      );
      expect(JSON.parse(await sh(count!))).toEqual({
        count: cities.filter((c) => c.country === 'NO').length,
      });
      for (const port of [base + 81, base + 82]) {
        const info = JSON.parse(await sh(`curl -s http://127.0.0.1:${port}/v1/endpoints/nordic-cities`));
        expect(info.recordCount).toBe(cities.length);
      }

      const status = await run('status');
      expect(status.code, `${status.stdout}\n${status.stderr}`).toBe(0);
      for (const name of ['node1', 'node2', 'node3', 'api1', 'api2'])
        expect(status.stdout).toMatch(new RegExp(`^${name}\\s+pid \\d+\\s+\\S+\\s+ready$`, 'm'));
      expect(status.stdout).toContain('transfers: 1 COMPLETED');
      expect(status.stdout).toMatch(new RegExp(`api1: nordic-cities ${cities.length} records`));
      expect(status.stdout).toMatch(/node3\s+http:\/\/127\.0\.0\.1:\d+\s+alive/);
      const pids = [...status.stdout.matchAll(/pid (\d+)/g)].map((m) => Number(m[1]));
      expect(pids).toHaveLength(5);

      const stopped = await run('stop');
      expect(stopped.code, stopped.stderr).toBe(0);
      for (const name of ['api2', 'api1', 'node3', 'node2', 'node1'])
        expect(stopped.stdout).toContain(`stopped ${name}`);
      expect(pids.filter(pidAlive)).toEqual([]);
      expect(stopped.stdout).not.toContain('killing it');
      const after = await run('status');
      expect(after.code).toBe(3);
      expect(after.stdout).toContain('The cluster is not running');
    } finally {
      const reset = await run('reset');
      expect(reset.code, reset.stderr).toBe(0);
      expect(await databaseExists()).toBe(false);
    }
  }, 900_000);
});
