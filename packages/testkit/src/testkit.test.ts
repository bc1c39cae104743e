import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  createTestDatabase,
  freeBasePort,
  freePort,
  portOpen,
  spawnProcess,
  spawnTs,
  startLogicalPostgres,
  startNatsServer,
  tempDir,
  waitFor,
} from './index.js';

describe('testkit', () => {
  it('finds free ports that can be bound, below the ephemeral range outgoing connections use', async () => {
    const port = await freePort();
    expect(port).toBeGreaterThanOrEqual(20_000);
    expect(port).toBeLessThan(32_000);
    expect(await portOpen(port)).toBe(false);
    const base = await freeBasePort([1, 2, 3, 81, 82]);
    expect(base + 82).toBeLessThan(32_000);
    for (const offset of [1, 2, 3, 81, 82]) expect(await portOpen(base + offset)).toBe(false);
  });

  it('creates temp dirs and removes them on dispose', async () => {
    let path = '';
    {
      await using dir = await tempDir();
      path = dir.path;
      await writeFile(join(path, 'x'), 'y');
      expect(existsSync(join(path, 'x'))).toBe(true);
    }
    expect(existsSync(path)).toBe(false);
  });

  it('spawns nats-server, kills it and restarts it on the same port', async () => {
    await using nats = await startNatsServer();
    expect(await portOpen(nats.port)).toBe(true);
    await nats.kill();
    expect(nats.running).toBe(false);
    expect(await portOpen(nats.port)).toBe(false);
    await nats.start();
    expect(await portOpen(nats.port)).toBe(true);
    await nats.restart();
    expect(await portOpen(nats.port)).toBe(true);
  });

  it('creates a fresh PostgreSQL database and drops it', async () => {
    let name = '';
    {
      await using db = await createTestDatabase();
      name = db.name;
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      await client.query('CREATE TABLE t (id int primary key)');
      await client.query('INSERT INTO t VALUES (1), (2)');
      const { rows } = await client.query('SELECT count(*)::int AS n FROM t');
      expect(rows[0].n).toBe(2);
      await client.end();
    }
    const admin = new pg.Client({
      connectionString: process.env.SLUICE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    });
    await admin.connect();
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    await admin.end();
    expect(rowCount).toBe(0);
  });

  it('starts a private PostgreSQL with wal_level=logical, restarts it on the same port, removes it on dispose', async () => {
    let dataDir = '';
    {
      await using server = await startLogicalPostgres();
      dataDir = server.dataDir;
      const url = await server.createDatabase('testkit');
      const query = async (sql: string) => {
        const client = new pg.Client({ connectionString: url });
        await client.connect();
        try {
          return (await client.query(sql)).rows;
        } finally {
          await client.end();
        }
      };
      expect(await query('SHOW wal_level')).toEqual([{ wal_level: 'logical' }]);
      await query('CREATE TABLE t (id int primary key)');
      await query('INSERT INTO t VALUES (1)');
      await server.restart('immediate');
      expect(server.running).toBe(true);
      expect(await query('SELECT count(*)::int AS n FROM t')).toEqual([{ n: 1 }]);
      await server.stop();
      expect(await portOpen(server.port)).toBe(false);
    }
    expect(existsSync(dataDir)).toBe(false);
  });

  it('spawns a process, reads its lines, and kills it with SIGKILL', async () => {
    await using child = spawnProcess(process.execPath, [
      '-e',
      'console.log("ready"); setInterval(() => {}, 1000)',
    ]);
    await child.waitForLine(/^ready$/);
    child.kill('SIGKILL');
    const exit = await child.exited;
    expect(exit.signal).toBe('SIGKILL');
  });

  it('signals a detached process group as a whole, like Ctrl-C in a terminal', async () => {
    const script = [
      "const { spawn } = require('node:child_process');",
      "const grandchild = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });",
      "console.log('grandchild ' + grandchild.pid);",
      'setInterval(() => {}, 1000);',
    ].join('\n');
    let grandchildPid = 0;
    {
      await using group = spawnProcess(process.execPath, ['-e', script], {
        detached: true,
        dispose: { signal: 'SIGINT', graceMs: 5_000 },
      });
      grandchildPid = Number((await group.waitForLine(/^grandchild \d+$/)).split(' ')[1]);
      expect(() => process.kill(grandchildPid, 0)).not.toThrow();
    }
    // Dispose sent SIGINT to the group: the grandchild, which never heard of it, is gone too.
    await waitFor(
      () => {
        try {
          process.kill(grandchildPid, 0);
          return false;
        } catch {
          return true;
        }
      },
      { timeoutMs: 5_000, what: 'the grandchild to exit' },
    );
  });

  it('runs TypeScript children against workspace sources', async () => {
    await using dir = await tempDir();
    const file = join(dir.path, 'child.ts');
    await writeFile(
      file,
      [
        "import { canTransition } from '@sluice/core';",
        'const n: number = 1;',
        "console.log('ok', canTransition('IN_PROGRESS', 'COMPLETED'), n);",
      ].join('\n'),
    );
    await using child = spawnTs(file, [], { cwd: process.cwd() });
    const exit = await child.exited;
    expect(child.output()).toContain('ok true 1');
    expect(exit.code).toBe(0);
  });

  it('defect: a child a test never disposed (it timed out before its `await using` ran) outlived the test process', async () => {
    const file = fileURLToPath(new URL('../test/fixtures/abandons-child.ts', import.meta.url));
    await using parent = spawnTs(file, [], { cwd: process.cwd() });
    const childPid = Number((await parent.waitForLine(/^child \d+$/)).split(' ')[1]);
    expect((await parent.exited).code).toBe(0);
    const alive = () => {
      try {
        process.kill(childPid, 0);
        return true;
      } catch {
        return false;
      }
    };
    try {
      await waitFor(() => !alive(), { timeoutMs: 3_000, what: `the abandoned child ${childPid} to be gone` });
    } finally {
      if (alive()) process.kill(childPid, 'SIGKILL');
    }
  });

  it('defect: a private PostgreSQL a test never disposed kept running after the test process exited', async () => {
    const file = fileURLToPath(new URL('../test/fixtures/abandons-logical-postgres.ts', import.meta.url));
    await using parent = spawnTs(file, [], { cwd: process.cwd() });
    const [, port, pid, dataDir] = (await parent.waitForLine(/^postgres \d+ \d+ /, 60_000)).split(' ');
    expect((await parent.exited).code).toBe(0);
    const alive = () => {
      try {
        process.kill(Number(pid), 0);
        return true;
      } catch {
        return false;
      }
    };
    try {
      await waitFor(() => !alive(), {
        timeoutMs: 10_000,
        what: `the abandoned postmaster ${pid} to be gone`,
      });
      expect(await portOpen(Number(port))).toBe(false);
    } finally {
      if (alive()) process.kill(Number(pid), 'SIGKILL');
      await rm(dataDir!, { recursive: true, force: true });
    }
  });

  it('waitFor times out with a clear message', async () => {
    await expect(waitFor(() => false, { timeoutMs: 100, what: 'never' })).rejects.toThrow(/never/);
  });
});
