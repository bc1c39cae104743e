// The two server processes of the quick start: their ports checked free first, each started in a process group
// of its own with its log file, watched for a crash, waited on until healthy, and stopped once, in order — on
// Ctrl-C, on a crash, on a failure, and (SIGKILL) whenever this script exits.
import { spawn } from 'node:child_process';
import { closeSync, fstatSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { getJson, sleep } from './http.mjs';
import { bold, red, say, shown, tty } from './output.mjs';
import {
  apiPort,
  appPort,
  configFile,
  dataDir,
  host,
  logDir,
  quickstartDir,
  root,
  storeUrl,
} from './settings.mjs';

const env = process.env;

/** Resolves when nobody listens on `port` (we can bind it ourselves); rejects with the reason otherwise. */
export function assertPortFree(port, variable) {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once('error', (err) => {
      const why =
        err.code === 'EADDRINUSE'
          ? `port ${port} is already in use (another quick start still running? \`lsof -i :${port}\` shows who)`
          : `cannot listen on ${host}:${port}: ${err.message}`;
      reject(new Error(`${why}. Stop it or choose another port: ${variable}=<port> pnpm start`));
    });
    probe.listen(port, host, () => probe.close(() => resolvePort()));
  });
}

/** Children run in their own process group: a terminal's Ctrl-C reaches this script, which stops them once, in order. */
function startServer(name, bin) {
  const logPath = join(logDir, `${name}.log`);
  const fd = openSync(logPath, 'a');
  // Where this launch's output begins: the log is appended to across starts, and another quick start on the same
  // data directory writes to it too, so a crash report reads from here on (see launchLines).
  const logStart = fstatSync(fd).size;
  writeSync(
    fd,
    `${JSON.stringify({ level: 30, time: Date.now(), msg: `--- pnpm start: launching ${name} ---` })}\n`,
  );
  const child = spawn(process.execPath, [join(root, bin), '--config', configFile], {
    cwd: quickstartDir,
    env: {
      ...env,
      SLUICE_PORT: String(appPort),
      SLUICE_API_PORT: String(apiPort),
      SLUICE_DATA_DIR: dataDir,
      SLUICE_STORE_URL: storeUrl,
    },
    stdio: ['ignore', fd, fd],
    detached: true,
  });
  closeSync(fd);
  const server = { name, child, logPath, logStart, exit: null };
  server.exited = new Promise((resolveExit) => {
    child.once('exit', (code, signal) => {
      server.exit = { code, signal };
      resolveExit(server.exit);
    });
    child.once('error', (err) => {
      server.exit = { code: null, signal: null, error: err };
      resolveExit(server.exit);
    });
  });
  return server;
}

/**
 * The last lines `server` itself wrote to its log: from its launch on, without the JSON lines of other processes
 * (a quick start already running on the same data directory appends to the same file, and its lines would read as
 * this server's failure). Lines that are not JSON (a CLI error on stderr) are this process's own.
 */
function launchLines(server, lines = 25) {
  let text;
  try {
    text = readFileSync(server.logPath).subarray(server.logStart).toString('utf8');
  } catch {
    return [];
  }
  const own = (line) => {
    if (!line.startsWith('{')) return true;
    try {
      const pid = JSON.parse(line).pid;
      return pid === undefined || pid === server.child.pid;
    } catch {
      return true;
    }
  };
  return text.trimEnd().split('\n').filter(own).slice(-lines);
}

/** The servers started so far, in start order. */
export const servers = [];
let stopping = false;

/** True once the quick start is stopping (a signal, a crash, a failure): nothing reports progress after that. */
export function isStopping() {
  return stopping;
}

/** Marks the quick start as stopping; true for the call that did it, false when it already was. */
export function beginStop() {
  if (stopping) return false;
  stopping = true;
  return true;
}

/** Starts server `name` from `bin` (relative to the repository) and watches it for a crash. */
export function launch(name, bin) {
  const server = startServer(name, bin);
  servers.push(server);
  watchForCrash(server);
  return server;
}

/** A server that exits on its own is fatal: say which, why (its log), and stop the other one. */
function watchForCrash(server) {
  void server.exited.then(async (exit) => {
    if (!beginStop()) return;
    if (tty) process.stdout.write('\n');
    const how = exit.error
      ? `could not be started: ${exit.error.message}`
      : `exited unexpectedly (${exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code}`})`;
    process.stderr.write(
      `${red('✖')} the ${server.name} ${how}. Its last lines in ${shown(server.logPath)}:\n`,
    );
    for (const line of launchLines(server)) process.stderr.write(`    ${line}\n`);
    await stopAll();
    process.exit(1);
  });
}

export async function stopAll() {
  // The api-server first (it only reads), then the app-server (it commits and closes the caches).
  for (const server of [...servers].reverse()) {
    if (server.exit) continue;
    server.child.kill('SIGINT');
    const timer = setTimeout(() => server.child.kill('SIGKILL'), 30_000);
    await server.exited;
    clearTimeout(timer);
  }
}

export async function waitUntilHealthy(server, url, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (server.exit || stopping) return new Promise(() => {}); // watchForCrash reports and exits
    try {
      await getJson(`${url}/healthz`);
      return;
    } catch {
      await sleep(200);
    }
  }
  beginStop();
  process.stderr.write(
    `${red('✖')} the ${server.name} did not answer on ${url} within ${timeoutMs / 1000} s. Last lines of ${shown(server.logPath)}:\n`,
  );
  for (const line of launchLines(server)) process.stderr.write(`    ${line}\n`);
  await stopAll();
  process.exit(1);
}

/**
 * Ctrl-C (and SIGTERM, SIGHUP) stops both servers and exits 0 when both stopped cleanly; whatever else ends this
 * script kills what is still running.
 */
export function stopOnSignals() {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      if (!beginStop()) return;
      if (tty) process.stdout.write('\n');
      say(`${bold('▸ stop')}   ${signal}: stopping the api-server and the app-server…`);
      void stopAll().then(() => {
        const unclean = servers.filter((s) => s.exit && (s.exit.code !== 0 || s.exit.signal));
        for (const s of unclean)
          process.stderr.write(
            `${red('✖')} the ${s.name} did not stop cleanly (${s.exit.signal ?? `exit code ${s.exit.code}`}); see ${shown(s.logPath)}\n`,
          );
        if (unclean.length === 0)
          say('         stopped cleanly. `pnpm start` again resumes from the checkpoint.');
        process.exit(unclean.length === 0 ? 0 : 1);
      });
    });
  }
  // Whatever happens to this script, it must not leave servers behind.
  process.on('exit', () => {
    for (const server of servers) if (!server.exit) server.child.kill('SIGKILL');
  });
}
