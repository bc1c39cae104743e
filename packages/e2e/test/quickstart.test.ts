import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { freePort, tempDir } from '@sluice/testkit';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildApps } from '../src/build.js';
import { repoRoot } from '../src/paths.js';
import { sh } from '../src/shell.js';
import { descendants, runAsUser } from '../src/user-process.js';

// The quick start exactly as the README says: `pnpm start` from the repository root, Ctrl-C to stop, `pnpm start`
// again to resume. Ports and the data directory come from the environment variables both apps honour, so the
// test never collides with a quick start a developer runs on the default ports.

interface City {
  [field: string]: unknown;
  id: number;
  name: string;
  country: string;
  lat: number;
}

const citiesFile = join(repoRoot, 'examples/quickstart/data/cities.jsonl');
const READY = /^Press Ctrl-C to stop both servers\.$/;
// `pnpm start` runs the turbo build first: cached (a second) in CI, where `pnpm build` ran before the tests, but a
// real rebuild (minutes on 2 cores) when sources changed since, e.g. while developing. The wait allows for that.
const BOOT_MS = 600_000;

function curlLines(output: string[]): string[] {
  return output.filter((line) => line.startsWith('curl '));
}

async function curlJson(line: string): Promise<Record<string, unknown>> {
  return JSON.parse(await sh(line)) as Record<string, unknown>;
}

describe('pnpm start (the quick start)', () => {
  beforeAll(async () => {
    // `pnpm start` builds too; building here first keeps the start below within its own timeout on a cold cache.
    await buildApps();
  }, 900_000);

  it('loads the cities with progress, prints curl queries that work as printed, stops on Ctrl-C, and resumes', async () => {
    await using data = await tempDir('sluice-e2e-quickstart-');
    const env = {
      SLUICE_PORT: String(await freePort()),
      SLUICE_API_PORT: String(await freePort()),
      SLUICE_DATA_DIR: join(data.path, 'state'),
    };

    let firstCache = '';
    // First start: from scratch, with progress.
    {
      await using start = runAsUser('pnpm', ['start'], { cwd: repoRoot, env });
      await start.waitForLine(READY, BOOT_MS);
      const out = start.lines;
      expect(out.some((l) => /first snapshot of "cities" \(from scratch/.test(l))).toBe(true);
      expect(out.some((l) => /▸ ready\s+"cities" serves 171,075 records/.test(l))).toBe(true);
      // Progress while the first snapshot loads: records loaded out of the total, and the rate.
      expect(
        out.some((l) => /^\s+[\d,]+ \/ 171,075 records loaded \([\d.]+%\), [\d,]+ records\/s$/.test(l)),
      ).toBe(true);
      // …ending on the complete count, right before the ready line.
      const readyAt = out.findIndex((l) => l.includes('▸ ready'));
      expect(out[readyAt - 1]).toMatch(/^\s+171,075 \/ 171,075 records loaded \(100%\)$/);

      firstCache = /from cache (\S+)/.exec(out.find((l) => l.includes('▸ ready')) ?? '')?.[1] ?? '';
      expect(firstCache).toMatch(/^cities-/);
      const cities = readFileSync(citiesFile, 'utf8')
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as City);
      expect(cities).toHaveLength(171_075);

      const commands = curlLines(out);
      expect(commands.length).toBeGreaterThanOrEqual(3);
      for (const command of commands) expect(command).toContain(`http://127.0.0.1:${env.SLUICE_API_PORT}/`);

      // Point lookup.
      const lookup = commands.find((c) => /\/records\/\d+$/.test(c))!;
      const id = Number(/\/records\/(\d+)$/.exec(lookup)![1]);
      const record = await curlJson(lookup);
      expect(record).toEqual(cities[id - 1]);
      expect(record.name).toBe('Paris');

      // Indexed query: a country's cities ordered by name, limited.
      const byName = commands.find((c) => c.includes('"$order_by":{"name":"asc"}'))!;
      const page = (await curlJson(byName)) as { records: City[]; next: string | null };
      const country = /"country":"([A-Z]{2})"/.exec(byName)![1]!;
      const limit = Number(/"\$limit":(\d+)/.exec(byName)![1]);
      const expected = cities
        .filter((c) => c.country === country)
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id))
        .slice(0, limit);
      expect(page.records).toEqual(expected);
      expect(page.next).toEqual(expect.any(String));

      // Count.
      const countLine = commands.find((c) => c.includes('/count'))!;
      const countCountry = /"country":"([A-Z]{2})"/.exec(countLine)![1]!;
      expect(await curlJson(countLine)).toEqual({
        count: cities.filter((c) => c.country === countCountry).length,
      });

      // Ordered by an index, descending.
      const northernmost = commands.find((c) => c.includes('"$order_by":{"lat":"desc"}'))!;
      const north = (await curlJson(northernmost)) as { records: City[] };
      expect(north.records.map((c) => c.id)).toEqual(
        [...cities]
          .sort((a, b) => b.lat - a.lat)
          .slice(0, north.records.length)
          .map((c) => c.id),
      );

      // Every printed command succeeds and answers JSON.
      for (const command of commands) await curlJson(command);

      // The console URL it prints serves the operator console (built into the app-server package).
      const consoleUrl = /console \(app-server\):\s+(\S+)/.exec(out.join('\n'))?.[1];
      expect(consoleUrl).toBe(`http://127.0.0.1:${env.SLUICE_PORT}/console`);
      const consolePage = await fetch(consoleUrl!);
      expect(consolePage.status).toBe(200);
      expect(await consolePage.text()).toContain('<title>Sluice console</title>');

      // JSON logs of both servers.
      const logs = await readdir(join(env.SLUICE_DATA_DIR, 'logs'));
      expect(logs.sort()).toEqual(['api-server.log', 'app-server.log']);
      const appLog = await readFile(join(env.SLUICE_DATA_DIR, 'logs/app-server.log'), 'utf8');
      expect(appLog).toContain('"msg":"app-server ready"');

      start.interrupt();
      expect(await start.exited).toEqual({ code: 0, signal: null });
      expect(start.lines.some((l) => l.includes('stopped cleanly'))).toBe(true);
    }

    // Second start: resumes from the checkpoint, serves the same generation, no loading.
    {
      await using start = runAsUser('pnpm', ['start'], { cwd: repoRoot, env });
      await start.waitForLine(READY, BOOT_MS);
      expect(start.lines.some((l) => /resumed from the checkpoint, no rebuild/.test(l))).toBe(true);
      expect(start.lines.some((l) => /records loaded/.test(l))).toBe(false);
      const count = curlLines(start.lines).find((c) => c.includes('/count'))!;
      expect(((await curlJson(count)) as { count: number }).count).toBeGreaterThan(0);
      const all = await curlJson(`curl -s http://127.0.0.1:${env.SLUICE_API_PORT}/v1/endpoints/cities`);
      expect(all.recordCount).toBe(171_075);
      expect(all.cache).toBe(firstCache);
      expect(start.lines.some((l) => l.includes(`from cache ${firstCache}`))).toBe(true);

      start.interrupt();
      expect(await start.exited).toEqual({ code: 0, signal: null });
    }

    // A server that dies is reported, the other one is stopped, and the start fails.
    {
      await using start = runAsUser('pnpm', ['start'], { cwd: repoRoot, env });
      await start.waitForLine(READY, BOOT_MS);
      const api = (await descendants(start.pid)).find((p) => p.args.includes('api-server/dist/bin.js'));
      expect(api).toBeDefined();
      process.kill(api!.pid, 'SIGKILL');
      expect((await start.exited).code).toBe(1);
      expect(start.output()).toMatch(/the api-server exited unexpectedly \(signal SIGKILL\)/);
      const left = (await descendants(start.pid)).filter((p) => p.args.includes('dist/bin.js'));
      expect(left).toEqual([]);
      // Both ports are free again: the app-server was stopped too.
      await expect(listenOnce(Number(env.SLUICE_PORT))).resolves.toBeUndefined();
    }
  }, 1_800_000);

  it('refuses to start, with a clear message, when a port is taken', async () => {
    await using data = await tempDir('sluice-e2e-quickstart-port-');
    const port = await freePort();
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      await using start = runAsUser('pnpm', ['start'], {
        cwd: repoRoot,
        env: {
          SLUICE_PORT: String(await freePort()),
          SLUICE_API_PORT: String(port),
          SLUICE_DATA_DIR: join(data.path, 'state'),
        },
      });
      expect((await start.exited).code).not.toBe(0);
      expect(start.output()).toContain(`port ${port} is already in use`);
      expect(start.output()).toContain('SLUICE_API_PORT=<port> pnpm start');
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  }, 60_000);
});

function listenOnce(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => server.close(() => resolve()));
  });
}
