#!/usr/bin/env node
// `pnpm start`: the quick start. Builds the two apps (turbo, cached after the first run), prepares the GeoNames
// cities dataset, runs one app-server and one api-server on embedded defaults (SQLite + LMDB, no NATS) with
// examples/quickstart/sluice.yaml, shows the first snapshot loading, then prints the URLs and example queries.
// Ctrl-C stops both servers and exits 0; the next `pnpm start` resumes from the checkpoint.
//
// Environment (each honoured by both apps as well): SLUICE_PORT (app-server, default 7070), SLUICE_API_PORT
// (api-server, default 8080), SLUICE_DATA_DIR (LMDB caches, store and logs; default examples/quickstart/.sluice),
// SLUICE_STORE_URL (default sqlite:<data dir>/store.db).
//
// This file is the sequence; each step is a module of scripts/start/: settings (ports, paths), build (turbo),
// servers (processes, health, stopping), progress (the first load), welcome (URLs and example queries).
import { readFileSync } from 'node:fs';
import { prepareCities } from './prepare-quickstart-data.mjs';
import { build } from './start/build.mjs';
import { prepareDataDir } from './start/data-dir.mjs';
import { bold, fail, number, red, say, shown } from './start/output.mjs';
import { waitUntilServing } from './start/progress.mjs';
import {
  assertPortFree,
  beginStop,
  launch,
  stopAll,
  stopOnSignals,
  waitUntilHealthy,
} from './start/servers.mjs';
import { apiPort, apiUrl, appPort, appUrl, endpoint, logDir } from './start/settings.mjs';
import { printRunning } from './start/welcome.mjs';

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

async function main() {
  say(bold('Sluice quick start: one app-server + one api-server, embedded (SQLite + LMDB, no NATS)'));
  try {
    await assertPortFree(appPort, 'SLUICE_PORT');
    await assertPortFree(apiPort, 'SLUICE_API_PORT');
  } catch (err) {
    fail(err.message);
  }
  prepareDataDir();
  await build();
  const total = prepareData();
  stopOnSignals();

  say(`${bold('▸ start')}  app-server on ${appUrl}, api-server on ${apiUrl} (logs: ${shown(logDir)}/)`);
  const app = launch('app-server', 'apps/app-server/dist/bin.js');
  await waitUntilHealthy(app, appUrl);
  const api = launch('api-server', 'apps/api-server/dist/bin.js');
  // Not awaited: the progress below shows while the api-server opens; it fails the start if it never answers.
  void waitUntilHealthy(api, apiUrl);

  const { served, seconds } = await waitUntilServing(total);
  say(
    `${bold('▸ ready')}  "${endpoint}" serves ${number(served.recordCount)} records from cache ${served.cache} (${seconds.toFixed(1)} s)`,
  );
  await printRunning();
}

main().catch(async (err) => {
  process.stderr.write(`${red('✖')} pnpm start failed: ${err?.stack ?? err}\n`);
  beginStop();
  await stopAll();
  process.exit(1);
});
