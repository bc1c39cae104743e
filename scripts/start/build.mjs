// The quick start's build step: turbo builds the two apps (cached after the first run), with a ticker while a
// first build takes minutes, and the build's own output when it fails.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { bold, fail, say, tty } from './output.mjs';
import { root } from './settings.mjs';

const env = process.env;

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

export async function build() {
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
