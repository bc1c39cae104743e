/**
 * `runCli` as an operator meets it, in a real child process: configuration errors, `--check`, signals, the
 * forced exit, a failed shutdown, a port in use, uncaught exceptions.
 */
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { FORCED_EXIT_MARGIN_MS } from '../src/cli.js';

const CHILD = fileURLToPath(new URL('./fixtures/cli-child.ts', import.meta.url));
const noStack = /\n\s+at /;

async function started(env: Record<string, string> = {}, args: string[] = []) {
  const dir = await tempDir('sluice-http-cli-');
  const port = await freePort();
  await writeFile(
    join(dir.path, 'sluice.yaml'),
    `api: { port: ${port} }\ntransfers: { shutdownGraceMs: 0 }\n`,
  );
  const child = spawnTs(CHILD, args, { cwd: dir.path, env });
  await child.waitForLine(/^listening \d+/);
  return { dir, port, child };
}

describe('runCli', () => {
  it('prints a bad configuration once as "<name>: CONFIG_INVALID: …" and exits 1, without a stack', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    await writeFile(join(dir.path, 'bad.yaml'), 'api: { port: 70000 }\n');
    const invalid = spawnTs(CHILD, ['--config', 'bad.yaml'], { cwd: dir.path });
    expect((await invalid.exited).code).toBe(1);
    const output = invalid.output();
    expect(output).toMatch(
      /^sluice-test-cli: CONFIG_INVALID: Invalid configuration in bad\.yaml:\n {2}api\.port: /,
    );
    // The failing field is named once: core's message already lists it.
    expect(output.match(/api\.port/g)).toHaveLength(1);
    expect(output).not.toMatch(noStack);

    await writeFile(join(dir.path, 'reserved.yaml'), 'api: { port: 1 }\n');
    const reserved = spawnTs(CHILD, ['-c', 'reserved.yaml'], { cwd: dir.path });
    expect((await reserved.exited).code).toBe(1);
    expect(reserved.output()).toBe(
      'sluice-test-cli: CONFIG_INVALID: api.port 1 is reserved for this test\n  - api.port: reserved',
    );

    const missing = spawnTs(CHILD, ['--config', 'missing.yaml'], { cwd: dir.path });
    expect((await missing.exited).code).toBe(1);
    expect(missing.output()).toMatch(
      /^sluice-test-cli: CONFIG_INVALID: Cannot read configuration file .*missing\.yaml/,
    );
  });

  it('defect: a YAML syntax error printed its reason three times (the parser\'s own position, then again as a "(root)" issue)', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    await writeFile(join(dir.path, 'broken.yaml'), 'node:\n  id: [a\nstore: x\n');
    const broken = spawnTs(CHILD, ['--config', 'broken.yaml'], { cwd: dir.path });
    expect((await broken.exited).code).toBe(1);
    const output = broken.output();
    expect(output).toMatch(
      /^sluice-test-cli: CONFIG_INVALID: broken\.yaml is not valid YAML at line 3, column 1: \S/,
    );
    // The reason once, its position once; no issue line repeating the message.
    expect(output.match(/Flow sequence/g)).toHaveLength(1);
    expect(output.match(/line 3, column 1/g)).toHaveLength(1);
    expect(output.trim().split('\n')).toHaveLength(1);
    expect(output).not.toMatch(noStack);
  });

  it('defect: --check of a file with moved keys (limits.leaseMs) said nothing; the start logs the warning, --check now prints it on stderr', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    await writeFile(join(dir.path, 'old.yaml'), 'limits: { leaseMs: 20000 }\n');
    const check = spawnTs(CHILD, ['--config', 'old.yaml', '--check'], { cwd: dir.path });
    expect((await check.exited).code).toBe(0);
    const warnings = check.lines.filter((line) => line.startsWith('sluice-test-cli: warning: '));
    expect(warnings).toEqual([
      'sluice-test-cli: warning: old.yaml: limits.leaseMs is deprecated: it is now transfers.leaseMs (the old key still works; move it to silence this warning)',
    ]);
    // The configuration itself is still printed whole, with the old key applied at its new place.
    const printed = check.lines.filter((line) => !warnings.includes(line)).join('\n');
    expect(JSON.parse(printed).transfers).toMatchObject({ leaseMs: 20000 });
  });

  it('--check prints the configuration with secrets redacted and exits 0; subcommands get the configuration; a bad argument exits 1', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    await writeFile(
      join(dir.path, 'sluice.yaml'),
      'api: { port: 18181, auth: { jwtSecret: "not-to-be-printed-secret" } }\n',
    );
    const check = spawnTs(CHILD, ['--check'], { cwd: dir.path });
    expect((await check.exited).code).toBe(0);
    expect(JSON.parse(check.output()).api).toMatchObject({ port: 18181, auth: { jwtSecret: '***' } });
    expect(check.output()).not.toContain('not-to-be-printed-secret');

    const unknown = spawnTs(CHILD, ['--colour', 'blue'], { cwd: dir.path });
    expect((await unknown.exited).code).toBe(1);
    expect(unknown.output()).toContain("error: unknown option '--colour'");
    const subcommand = spawnTs(CHILD, ['show-port'], { cwd: dir.path });
    expect((await subcommand.exited).code).toBe(3);
    expect(subcommand.output()).toBe('port 18181');
    await writeFile(join(dir.path, 'bad.yaml'), 'api: { port: 70000 }\n');
    const badSubcommand = spawnTs(CHILD, ['--config', 'bad.yaml', 'show-port'], { cwd: dir.path });
    expect((await badSubcommand.exited).code).toBe(1);
    expect(badSubcommand.output()).toMatch(
      /^sluice-test-cli: CONFIG_INVALID: Invalid configuration in bad\.yaml/,
    );
    const badPort = spawnTs(CHILD, ['--port', 'eighty'], { cwd: dir.path });
    expect((await badPort.exited).code).toBe(1);
    expect(badPort.output()).toContain('must be a port number');
  });

  it('takes its own options, and stops once on SIGTERM/SIGINT (repeats ignored), exiting 0', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    const port = await freePort();
    await using child = spawnTs(CHILD, ['--port', String(port)], { cwd: dir.path });
    await child.waitForLine(new RegExp(`^listening ${port}$`));
    expect(await (await fetch(`http://127.0.0.1:${port}/`)).text()).toBe('ok');
    child.kill('SIGINT');
    await child.waitForLine(/^closing on SIGINT$/);
    child.kill('SIGTERM');
    child.kill('SIGINT');
    expect(await child.exited).toEqual({ code: 0, signal: null });
    expect(child.lines.filter((line) => line.startsWith('closing'))).toEqual(['closing on SIGINT']);
  });

  it('defect: SIGHUP (a closed terminal, an ssh session ending) killed the program at once (exit 129) without closing it — it stops gracefully, as on SIGTERM', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    const port = await freePort();
    await using child = spawnTs(CHILD, ['--port', String(port)], { cwd: dir.path });
    await child.waitForLine(new RegExp(`^listening ${port}$`));
    child.kill('SIGHUP');
    await child.waitForLine(/^closing on SIGHUP$/);
    expect(await child.exited).toEqual({ code: 0, signal: null });
  });

  it('stops gracefully on a signal sent the moment it says it listens, or while it is still starting', async () => {
    // `started` signals as soon as the line arrives: the handlers must be in place before the start resolves.
    const { dir, child } = await started();
    await using _dir = dir;
    await using _child = child;
    expect((await child.stop('SIGTERM')).code).toBe(0);
    expect(child.lines).toContain('closing on SIGTERM');

    await using slowDir = await tempDir('sluice-http-cli-');
    await using slow = spawnTs(CHILD, ['--port', String(await freePort())], {
      cwd: slowDir.path,
      env: { CLI_START_MS: '500' },
    });
    await slow.waitForLine(/^starting$/);
    slow.kill('SIGINT');
    expect(await slow.exited).toEqual({ code: 0, signal: null });
    expect(slow.lines.slice(-2)).toEqual([expect.stringMatching(/^listening \d+$/), 'closing on SIGINT']);
  });

  it(`forces the exit (1) when closing takes longer than graceMs + ${FORCED_EXIT_MARGIN_MS} ms`, async () => {
    const { dir, child } = await started({ CLI_CLOSE: 'hang' });
    await using _dir = dir;
    await using _child = child;
    const signalled = Date.now();
    child.kill('SIGTERM');
    const exit = await child.exited;
    const elapsed = Date.now() - signalled;
    expect(exit.code).toBe(1);
    expect(elapsed).toBeGreaterThanOrEqual(FORCED_EXIT_MARGIN_MS - 50);
    expect(elapsed).toBeLessThan(FORCED_EXIT_MARGIN_MS + 5_000);
    expect(child.output()).toContain(
      `sluice-test-cli: shutdown took longer than ${FORCED_EXIT_MARGIN_MS} ms after SIGTERM, exiting`,
    );
  }, 30_000);

  it('exits 1 naming the cause when closing fails', async () => {
    const { dir, child } = await started({ CLI_CLOSE: 'fail' });
    await using _dir = dir;
    await using _child = child;
    expect((await child.stop('SIGTERM')).code).toBe(1);
    expect(child.output()).toContain('sluice-test-cli: shutdown failed: the store would not close');
  });

  it('a port in use is a one-line error with the hint, exit 1', async () => {
    await using dir = await tempDir('sluice-http-cli-');
    const port = await freePort();
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      const child = spawnTs(CHILD, ['--port', String(port)], { cwd: dir.path });
      expect((await child.exited).code).toBe(1);
      expect(child.output()).toBe(
        `sluice-test-cli: 127.0.0.1:${port} is already in use; choose another api.port (--port) or stop what listens there`,
      );
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it('survives the uncaught exceptions the program says it handled, and exits 1 on any other', async () => {
    const survivor = await started({ CLI_THROW: 'survivable' });
    await using _survivorDir = survivor.dir;
    await using _survivor = survivor.child;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await (await fetch(`http://127.0.0.1:${survivor.port}/`)).text()).toBe('ok');
    expect((await survivor.child.stop('SIGTERM')).code).toBe(0);

    const fatal = await started({ CLI_THROW: 'fatal' });
    await using _fatalDir = fatal.dir;
    await using _fatal = fatal.child;
    expect((await fatal.child.exited).code).toBe(1);
    expect(fatal.child.output()).toContain('sluice-test-cli: uncaught exception: Error: fatal failure');
  });
});
