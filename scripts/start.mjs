#!/usr/bin/env node
// `pnpm start`: the quick start. Builds the two apps (turbo, cached after the first run), prepares the GeoNames
// cities dataset, runs one app-server and one api-server on embedded defaults (SQLite + LMDB, no NATS) with
// examples/quickstart/sluice.yaml, shows the first snapshot loading, then prints the URLs and example queries.
// Ctrl-C stops both servers and exits 0; the next `pnpm start` resumes from the checkpoint.
//
// Environment (each honoured by both apps as well): SLUICE_PORT (app-server, default 7070), SLUICE_API_PORT
// (api-server, default 8080), SLUICE_DATA_DIR (LMDB caches, store and logs; default examples/quickstart/.sluice),
// SLUICE_STORE_URL (default sqlite:<data dir>/store.db).
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prepareCities } from './prepare-quickstart-data.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const quickstartDir = join(root, 'examples/quickstart');
const configFile = 'sluice.yaml';
const endpoint = 'cities';
const host = '127.0.0.1';

const env = process.env;
const appPort = portFrom('SLUICE_PORT', 7070);
const apiPort = portFrom('SLUICE_API_PORT', 8080);
const dataDir = resolve(quickstartDir, env.SLUICE_DATA_DIR || '.sluice');
const storeUrl = env.SLUICE_STORE_URL || `sqlite:${join(dataDir, 'store.db')}`;
const logDir = join(dataDir, 'logs');
const appUrl = `http://${host}:${appPort}`;
const apiUrl = `http://${host}:${apiPort}`;

const tty = Boolean(process.stdout.isTTY);
const bold = (text) => (tty ? `\x1b[1m${text}\x1b[22m` : text);
const red = (text) => (tty ? `\x1b[31m${text}\x1b[39m` : text);
const number = (n) => n.toLocaleString('en-US');
/** A path as the user should read it: relative to where they are when it is inside, else absolute. */
const shown = (path) => {
  const rel = relative(process.cwd(), path);
  return rel === '' ? '.' : rel.startsWith('..') ? path : rel;
};
const say = (line = '') => process.stdout.write(`${line}\n`);

function portFrom(variable, fallback) {
  const value = env[variable];
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 65_535)
    fail(`${variable}=${value} is not a port number (1-65535)`);
  return Number(value);
}

function fail(message, details = []) {
  process.stderr.write(`${red('✖')} ${message}\n`);
  for (const line of details) process.stderr.write(`  ${line}\n`);
  process.exit(1);
}

/** Resolves when nobody listens on `port` (we can bind it ourselves); rejects with the reason otherwise. */
function assertPortFree(port, variable) {
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

/** Runs a command to completion, collecting its output (the build takes minutes the first time: never block). */
function run(command, args, options) {
  return new Promise((resolveRun) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('error', (error) => resolveRun({ status: null, signal: null, error, stdout, stderr }));
    child.on('close', (status, signal) => resolveRun({ status, signal, stdout, stderr }));
  });
}

async function build() {
  const started = Date.now();
  say(`${bold('▸ build')}  the app-server and the api-server (turbo; cached after the first run)`);
  // A first build takes minutes on a small machine: say that it is still going.
  const ticker = setInterval(
    () => {
      const elapsed = Math.round((Date.now() - started) / 1000);
      const line = `         still building… ${elapsed} s (a first build takes a few minutes; later ones come from the cache)`;
      if (tty) process.stdout.write(`\r${line}`);
      else say(line);
    },
    tty ? 1_000 : 15_000,
  );
  const turbo = join(root, 'node_modules/.bin/turbo');
  const args = [
    'run',
    'build',
    '--filter=@sluice/app-server',
    '--filter=@sluice/api-server',
    '--output-logs=errors-only',
  ];
  const options = { cwd: root, env: { ...env, TURBO_TELEMETRY_DISABLED: '1' } };
  const result = existsSync(turbo)
    ? await run(turbo, args, options)
    : await run('pnpm', ['turbo', ...args], options);
  clearInterval(ticker);
  if (tty && Date.now() - started >= 1_000) process.stdout.write('\r\x1b[2K');
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.status !== 0)
    fail(
      `the build failed (exit ${result.status ?? result.signal ?? result.error?.message}):`,
      output.split('\n'),
    );
  const cached = /Cached:\s+(\d+) cached, (\d+) total/.exec(output);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  say(
    `         done in ${seconds} s${cached ? ` (${cached[1]} of ${cached[2]} tasks from the turbo cache)` : ''}`,
  );
}

function prepareData() {
  const prepared = prepareCities();
  const total = prepared.records ?? countLines(prepared.path);
  say(
    `${bold('▸ data')}   ${number(total)} GeoNames cities in ${shown(prepared.path)}${prepared.written ? ' (written now)' : ''}`,
  );
  return total;
}

function countLines(path) {
  const buffer = readFileSync(path);
  let lines = 0;
  for (let i = buffer.indexOf(10); i !== -1; i = buffer.indexOf(10, i + 1)) lines++;
  return lines;
}

/** Children run in their own process group: a terminal's Ctrl-C reaches this script, which stops them once, in order. */
function startServer(name, bin) {
  const logPath = join(logDir, `${name}.log`);
  const fd = openSync(logPath, 'a');
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
  const server = { name, child, logPath, exit: null };
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

function logTail(path, lines = 25) {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines);
  } catch {
    return [];
  }
}

const servers = [];
let stopping = false;

/** A server that exits on its own is fatal: say which, why (its log), and stop the other one. */
function watchForCrash(server) {
  void server.exited.then(async (exit) => {
    if (stopping) return;
    stopping = true;
    if (tty) process.stdout.write('\n');
    const how = exit.error
      ? `could not be started: ${exit.error.message}`
      : `exited unexpectedly (${exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code}`})`;
    process.stderr.write(`${red('✖')} the ${server.name} ${how}. Last lines of ${shown(server.logPath)}:\n`);
    for (const line of logTail(server.logPath)) process.stderr.write(`    ${line}\n`);
    await stopAll();
    process.exit(1);
  });
}

async function stopAll() {
  // The api-server first (it only reads), then the app-server (it commits and closes the caches).
  for (const server of [...servers].reverse()) {
    if (server.exit) continue;
    server.child.kill('SIGINT');
    const timer = setTimeout(() => server.child.kill('SIGKILL'), 30_000);
    await server.exited;
    clearTimeout(timer);
  }
}

async function getJson(url, init) {
  const response = await fetch(url, { ...init, signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

async function getText(url) {
  const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

const sleep = (ms) => new Promise((resolveSleep) => setTimeout(resolveSleep, ms));

async function waitUntilHealthy(server, url, timeoutMs = 120_000) {
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
  stopping = true;
  process.stderr.write(
    `${red('✖')} the ${server.name} did not answer on ${url} within ${timeoutMs / 1000} s. Last lines of ${shown(server.logPath)}:\n`,
  );
  for (const line of logTail(server.logPath)) process.stderr.write(`    ${line}\n`);
  await stopAll();
  process.exit(1);
}

/** Records the endpoint pipeline has written so far (the app-server's Prometheus gauge). */
async function recordsWritten() {
  const text = await getText(`${appUrl}/metrics`);
  const match = new RegExp(`^sluice_pipeline_records_written\\{endpoint="${endpoint}"\\} (\\d+)`, 'm').exec(
    text,
  );
  return match ? Number(match[1]) : null;
}

/** Polls the app-server (restart decision, progress) and the api-server (serving) until the endpoint is served. */
async function waitUntilServing(total) {
  let announced = false;
  let lastLine = '';
  let lastPrinted = 0;
  let lastError = '';
  const started = Date.now();
  const samples = [];
  for (;;) {
    if (stopping) return new Promise(() => {});
    let status = null;
    try {
      const body = await getJson(`${appUrl}/v1/endpoints`);
      status = body.endpoints.find((e) => e.name === endpoint) ?? null;
    } catch {
      // not answering for a moment (starting, busy committing): poll again
    }
    if (status && !announced && status.decision) {
      announced = true;
      const { decision, reason } = status.decision;
      if (decision === 'resume')
        say(`${bold('▸ resume')} resumed from the checkpoint, no rebuild: ${reason}`);
      else say(`${bold('▸ load')}   first snapshot of "${endpoint}" (from scratch: ${reason})`);
    }
    if (status?.error && status.error.message !== lastError) {
      lastError = status.error.message;
      if (tty) process.stdout.write('\n');
      process.stderr.write(
        `${red('!')} the "${endpoint}" pipeline reports ${status.error.code}: ${status.error.message} (it retries; see ${shown(join(logDir, 'app-server.log'))})\n`,
      );
    }
    let served = null;
    try {
      served = await getJson(`${apiUrl}/v1/endpoints/${endpoint}`);
    } catch {
      // not yet: the alias moves when the first snapshot is complete
    }
    if (served && status?.buildingCache === null) {
      if (lastLine) {
        // The last poll may have been before the final commit: end the progress on the complete count.
        const done = `         ${number(served.recordCount)} / ${number(total)} records loaded (100%)`;
        if (tty) process.stdout.write(`\r${done.padEnd(lastLine.length)}\n`);
        else say(done);
      }
      return { served, status, seconds: (Date.now() - started) / 1000 };
    }
    // Progress only while a generation is being built (a resumed endpoint is already complete: nothing to show).
    const written = status?.buildingCache ? await recordsWritten().catch(() => null) : null;
    if (written !== null) {
      const now = Date.now();
      samples.push({ t: now, written });
      while (samples.length > 2 && samples[0].t < now - 3_000) samples.shift();
      const first = samples[0];
      const rate = now > first.t ? Math.round(((written - first.written) * 1000) / (now - first.t)) : 0;
      const percent = total > 0 ? Math.min(100, (written * 100) / total).toFixed(1) : '?';
      const line = `         ${number(written)} / ${number(total)} records loaded (${percent}%), ${number(rate)} records/s`;
      if (tty) {
        process.stdout.write(`\r${line.padEnd(lastLine.length)}`);
        lastLine = line;
      } else if (line !== lastLine && now - lastPrinted >= 1_000) {
        say(line);
        lastLine = line;
        lastPrinted = now;
      }
    }
    await sleep(400);
  }
}

function curlExamples(parisId) {
  const post = (route, body) =>
    `curl -s ${apiUrl}/v1/endpoints/${endpoint}/${route} -H 'content-type: application/json' -d '${JSON.stringify(body)}'`;
  return [
    ['one city by its primary key (Paris)', `curl -s ${apiUrl}/v1/endpoints/${endpoint}/records/${parisId}`],
    [
      'cities of the Netherlands ordered by name, first page of 5 (index [country, name]; "next" is the cursor for $after)',
      post('query', { $filter: { country: 'NL' }, $order_by: { name: 'asc' }, $limit: 5 }),
    ],
    ['how many cities France has (index [country])', post('count', { $filter: { country: 'FR' } })],
    ['the three northernmost cities (index [lat])', post('query', { $order_by: { lat: 'desc' }, $limit: 3 })],
    [
      'cities on the 60th parallel, at most 5 (a range on [lat])',
      post('query', { $filter: { lat: { $gte: 59.95, $lt: 60.05 } }, $limit: 5 }),
    ],
    [
      'the endpoints this api-server serves, with their cache generation and checkpoint',
      `curl -s ${apiUrl}/v1/endpoints`,
    ],
  ];
}

async function findParis() {
  try {
    const body = await getJson(`${apiUrl}/v1/endpoints/${endpoint}/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ $filter: { name: 'Paris', country: 'FR' }, $limit: 1 }),
    });
    return body.records[0]?.id ?? 1;
  } catch {
    return 1;
  }
}

async function main() {
  say(bold('Sluice quick start: one app-server + one api-server, embedded (SQLite + LMDB, no NATS)'));
  try {
    await assertPortFree(appPort, 'SLUICE_PORT');
    await assertPortFree(apiPort, 'SLUICE_API_PORT');
  } catch (err) {
    fail(err.message);
  }
  await build();
  const total = prepareData();
  mkdirSync(logDir, { recursive: true });

  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
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

  say(`${bold('▸ start')}  app-server on ${appUrl}, api-server on ${apiUrl} (logs: ${shown(logDir)}/)`);
  const app = startServer('app-server', 'apps/app-server/dist/bin.js');
  servers.push(app);
  watchForCrash(app);
  await waitUntilHealthy(app, appUrl);
  const api = startServer('api-server', 'apps/api-server/dist/bin.js');
  servers.push(api);
  watchForCrash(api);
  // Not awaited: the progress below shows while the api-server opens; it fails the start if it never answers.
  void waitUntilHealthy(api, apiUrl);

  const { served, seconds } = await waitUntilServing(total);
  say(
    `${bold('▸ ready')}  "${endpoint}" serves ${number(served.recordCount)} records from cache ${served.cache} (${seconds.toFixed(1)} s)`,
  );
  const parisId = await findParis();
  say();
  say(bold('Sluice is running.'));
  say(`  query API (api-server):   ${apiUrl}   OpenAPI docs: ${apiUrl}/docs`);
  say(
    `  console (app-server):     ${appUrl}/console   endpoints, transfers, nodes; Rebuild / Promote / Roll back`,
  );
  say(`  control API (app-server): ${appUrl}   OpenAPI docs: ${appUrl}/docs   metrics: ${appUrl}/metrics`);
  say(
    `  logs (JSON lines):        ${shown(join(logDir, 'app-server.log'))}, ${shown(join(logDir, 'api-server.log'))}`,
  );
  say();
  say('Try these queries:');
  say();
  for (const [what, command] of curlExamples(parisId)) {
    say(`# ${what}`);
    say(command);
    say();
  }
  say('Press Ctrl-C to stop both servers.');
}

main().catch(async (err) => {
  process.stderr.write(`${red('✖')} pnpm start failed: ${err?.stack ?? err}\n`);
  stopping = true;
  await stopAll();
  process.exit(1);
});
