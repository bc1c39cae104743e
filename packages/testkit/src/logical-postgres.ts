import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './ports.js';
import { killOnExit } from './process.js';

const DEFAULT_BIN_DIR = '/usr/lib/postgresql/15/bin';

/** Where initdb / pg_ctl live (`SLUICE_TEST_PG_BIN` overrides); throws a clear error when missing. */
export function postgresBinDir(): string {
  const dir = process.env.SLUICE_TEST_PG_BIN ?? DEFAULT_BIN_DIR;
  if (!existsSync(join(dir, 'initdb')) || !existsSync(join(dir, 'pg_ctl'))) {
    throw new Error(
      `PostgreSQL server binaries not found in ${dir} (initdb, pg_ctl); install postgresql-15 (apt-get install postgresql) or set SLUICE_TEST_PG_BIN`,
    );
  }
  return dir;
}

/** A private PostgreSQL cluster started by {@link startLogicalPostgres}. */
export interface LogicalPostgresHandle extends AsyncDisposable {
  /** Superuser URL of the `postgres` database. */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly running: boolean;
  /** URL of another database of this cluster. */
  urlOf(database: string): string;
  /** Creates a fresh database and returns its URL. */
  createDatabase(prefix?: string): Promise<string>;
  /** Stops the server (`fast`: disconnects clients and checkpoints; `immediate`: like a crash). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  /** Starts it again on the same port and data directory. */
  start(): Promise<void>;
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
  /** The server's log so far (for failure messages). */
  log(): Promise<string>;
}

export interface LogicalPostgresOptions {
  /** `wal_level` of the cluster (default `logical`; `replica` to test the start-up error). */
  walLevel?: 'logical' | 'replica';
  /** Extra `-c name=value` settings. */
  settings?: Record<string, string | number>;
}

interface RunResult {
  code: number | null;
  output: string;
}

function run(command: string, args: string[]): Promise<RunResult> {
  // As root, the server refuses to run: every binary runs as the postgres user.
  const asRoot = process.getuid?.() === 0;
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  return new Promise((resolve) => {
    const child = spawn(file, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', (err) => resolve({ code: -1, output: `${output}${err.message}` }));
    child.on('close', (code) => resolve({ code, output }));
  });
}

async function postgresUid(): Promise<{ uid: number; gid: number } | null> {
  if (process.getuid?.() !== 0) return null;
  const passwd = await readFile('/etc/passwd', 'utf8');
  const line = passwd.split('\n').find((l) => l.startsWith('postgres:'));
  if (!line) throw new Error('running as root but there is no "postgres" user to run the test cluster as');
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * Starts a private PostgreSQL cluster (`initdb` + `pg_ctl`) on a free port with `wal_level=logical`, for tests
 * of logical replication (the machine's shared server runs `wal_level=replica`). As root it runs the server as the
 * `postgres` user with a data directory it owns. Trust authentication on 127.0.0.1 and a socket in the data
 * directory; dispose stops it (immediately) and removes the directory. Fails loudly when it cannot start.
 *
 * @example
 * ```ts
 * await using server = await startLogicalPostgres();
 * const url = await server.createDatabase('cdc');
 * await server.restart(); // PostgreSQL restarted mid-stream
 * ```
 */
export async function startLogicalPostgres(
  options: LogicalPostgresOptions = {},
): Promise<LogicalPostgresHandle> {
  const bin = postgresBinDir();
  const owner = await postgresUid();
  const dataDir = await mkdtemp(join(tmpdir(), 'sluice-pg-'));
  if (owner) await chown(dataDir, owner.uid, owner.gid);
  const port = await freePort();
  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    wal_level: options.walLevel ?? 'logical',
    max_replication_slots: 20,
    max_wal_senders: 20,
    // A test cluster: nothing here must survive an OS crash, and the shared machine's disks are slow.
    fsync: 'off',
    full_page_writes: 'off',
    ...options.settings,
  };
  const serverOptions = [
    `-p ${port}`,
    `-k ${dataDir}`,
    ...Object.entries(settings).map(([name, value]) => `-c ${name}=${value}`),
  ].join(' ');
  const logFile = join(dataDir, 'log');

  const init = await run(join(bin, 'initdb'), [
    '-D',
    dataDir,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-sync',
  ]);
  if (init.code !== 0) {
    await rm(dataDir, { recursive: true, force: true });
    throw new Error(`initdb failed (exit ${init.code}):\n${init.output}`);
  }

  let running = false;
  // pg_ctl daemonizes the server, so it is no child of this process: until it is stopped, an exit of this
  // process (a test that timed out, a crash) stops it immediately — SIGQUIT to the postmaster.
  let forgetOnExit: (() => void) | null = null;
  const log = () => readFile(logFile, 'utf8').catch(() => '');
  const start = async () => {
    if (running) return;
    const result = await run(join(bin, 'pg_ctl'), [
      '-D',
      dataDir,
      '-l',
      logFile,
      '-w',
      '-t',
      '60',
      'start',
      '-o',
      serverOptions,
    ]);
    if (result.code !== 0)
      throw new Error(`pg_ctl start failed (exit ${result.code}):\n${result.output}\n${await log()}`);
    running = true;
    const pid = Number((await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    forgetOnExit = killOnExit(() => {
      try {
        process.kill(pid, 'SIGQUIT');
      } catch {
        // already gone
      }
    });
  };
  const stop = async (mode: 'fast' | 'immediate' = 'fast') => {
    if (!running) return;
    const result = await run(join(bin, 'pg_ctl'), ['-D', dataDir, '-w', '-t', '60', '-m', mode, 'stop']);
    if (result.code !== 0)
      throw new Error(`pg_ctl stop failed (exit ${result.code}):\n${result.output}\n${await log()}`);
    running = false;
    forgetOnExit?.();
    forgetOnExit = null;
  };

  try {
    await start();
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  const urlOf = (database: string) => `postgres://postgres@127.0.0.1:${port}/${database}`;
  let databases = 0;
  return {
    url: urlOf('postgres'),
    port,
    dataDir,
    get running() {
      return running;
    },
    urlOf,
    async createDatabase(prefix = 'sluice_test') {
      const name = `${prefix}_${++databases}`.toLowerCase();
      const admin = new pg.Client({ connectionString: urlOf('postgres') });
      await admin.connect();
      try {
        await admin.query(`CREATE DATABASE "${name}"`);
      } finally {
        await admin.end();
      }
      return urlOf(name);
    },
    stop,
    start,
    async restart(mode = 'fast') {
      await stop(mode);
      await start();
    },
    log,
    async [Symbol.asyncDispose]() {
      await stop('immediate').catch(() => {});
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
