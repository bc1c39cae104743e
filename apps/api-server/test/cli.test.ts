/**
 * The `sluice-api-server` command as an operator meets it: configuration errors, `--check`, a busy port.
 */
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { freePort, spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { API_BIN } from './helpers.js';

describe('sluice-api-server command', () => {
  it('a bad configuration exits 1 with CONFIG_INVALID naming the field; --check prints it with secrets redacted', async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const bad = join(dir.path, 'bad.yaml');
    await writeFile(bad, 'api: { port: 70000 }\nnode: { colour: blue }\n');
    const invalid = spawnTs(API_BIN, ['--config', bad], { cwd: dir.path });
    expect((await invalid.exited).code).toBe(1);
    expect(invalid.output()).toContain('sluice-api-server: CONFIG_INVALID: Invalid configuration in');
    expect(invalid.output()).toMatch(/api\.port/);
    expect(invalid.output()).not.toMatch(/\n\s+at /);

    const good = join(dir.path, 'sluice.yaml');
    await writeFile(good, 'api: { port: 18181, auth: { jwtSecret: "not-to-be-printed-secret" } }\n');
    const check = spawnTs(API_BIN, ['--check'], { cwd: dir.path });
    expect((await check.exited).code).toBe(0);
    const printed = JSON.parse(check.output());
    expect(printed.api).toMatchObject({ port: 18181, auth: { jwtSecret: '***' } });
    expect(check.output()).not.toContain('not-to-be-printed-secret');
  });

  it('names a stray argument instead of "too many arguments", and exits 1 without starting', async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const stray = spawnTs(API_BIN, ['serve'], { cwd: dir.path });
    expect((await stray.exited).code).toBe(1);
    expect(stray.output()).toContain(
      "error: unexpected argument 'serve' (sluice-api-server takes options only)",
    );
    expect(stray.output()).not.toContain('too many arguments');
    expect(stray.output()).toContain('Usage: sluice-api-server');
  });

  it('logs one warning per key that moved (an old sluice.yaml still starts)', async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const port = await freePort();
    // The port is taken so that the process stops right after logging its start-up lines.
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      await writeFile(join(dir.path, 'sluice.yaml'), 'limits: { bodyBytes: 4096, queryLimitMax: 100 }\n');
      const child = spawnTs(API_BIN, ['--port', String(port)], { cwd: dir.path });
      expect((await child.exited).code).toBe(1);
      const warnings = child.lines
        .filter((line) => line.includes('is deprecated'))
        .map((line) => JSON.parse(line) as { level: number; key: string; movedTo: string; msg: string });
      expect(warnings.map(({ level, key, movedTo }) => ({ level, key, movedTo }))).toEqual([
        { level: 40, key: 'limits.bodyBytes', movedTo: 'http.bodyBytes' },
        { level: 40, key: 'limits.queryLimitMax', movedTo: 'query.maxLimit' },
      ]);
      expect(warnings[0]?.msg).toBe(
        'sluice.yaml: limits.bodyBytes is deprecated: it is now http.bodyBytes (the old key still works; move it to silence this warning)',
      );
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it("defect: an api.host that does not resolve or is not this machine's crashed with a stack naming no key", async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const cases = [
      {
        host: 'no-such-host.invalid',
        line: 'sluice-api-server: CONFIG_INVALID: api.host: no-such-host.invalid does not resolve to an address (getaddrinfo ENOTFOUND)',
      },
      {
        host: '10.255.255.1',
        line: 'sluice-api-server: CONFIG_INVALID: api.host: 10.255.255.1 is not an address of this machine (listen EADDRNOTAVAIL); use one of its addresses, or 0.0.0.0 for all of them',
      },
    ];
    for (const { host, line } of cases) {
      await writeFile(join(dir.path, 'sluice.yaml'), `api: { host: ${host}, port: 0 }\n`);
      const child = spawnTs(API_BIN, [], { cwd: dir.path, env: { SLUICE_LOG_LEVEL: 'silent' } });
      expect({ host, code: (await child.exited).code }).toEqual({ host, code: 1 });
      expect(child.output()).toBe(line);
    }
    // The --host flag overrides api.host: the flag is what the operator has to change.
    const flagged = spawnTs(API_BIN, ['--host', '10.255.255.1', '--port', '0'], {
      cwd: dir.path,
      env: { SLUICE_LOG_LEVEL: 'silent' },
    });
    expect((await flagged.exited).code).toBe(1);
    expect(flagged.output()).toContain(
      'sluice-api-server: CONFIG_INVALID: --host: 10.255.255.1 is not an address',
    );
  });

  it('defect: api.changes.maxPerClient above api.changes.maxSubscribers was accepted, a per-client bound that can never refuse', async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const check = async (yaml: string) => {
      const file = join(dir.path, 'sluice.yaml');
      await writeFile(file, yaml);
      await using child = spawnTs(API_BIN, ['--config', file, '--check'], { cwd: dir.path });
      return { code: (await child.exited).code, output: child.output() };
    };
    // The process bound is checked first, so a client can never reach a per-client bound above it.
    const refused = await check('api: { changes: { maxSubscribers: 50, maxPerClient: 500 } }\n');
    expect(refused.code).toBe(1);
    expect(refused.output).toContain('sluice-api-server: CONFIG_INVALID: Invalid configuration in');
    expect(refused.output).toContain(
      'api.changes.maxPerClient: 500 is more than api.changes.maxSubscribers (50): one client can never hold more feeds than the api-server accepts in all, so this bound would never refuse; lower it or raise api.changes.maxSubscribers',
    );
    expect(refused.output).not.toMatch(/\n\s+at /);
    // Left out, the per-client bound is its default, or the process bound when that is lower (a small
    // maxSubscribers alone is no mistake); written equal to it, it is accepted as before.
    for (const [yaml, perClient] of [
      ['api: { changes: { maxSubscribers: 50 } }\n', 50],
      ['api: { changes: { maxSubscribers: 50, maxPerClient: 50 } }\n', 50],
      ['api: { changes: { maxSubscribers: 500 } }\n', 100],
    ] as const) {
      const accepted = await check(yaml);
      expect({ yaml, code: accepted.code }).toEqual({ yaml, code: 0 });
      expect(JSON.parse(accepted.output).api.changes).toMatchObject({ maxPerClient: perClient });
    }
  });

  it('a port already in use is a one-line error and exit 1', async () => {
    await using dir = await tempDir('sluice-api-cli-');
    const port = await freePort();
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      const child = spawnTs(API_BIN, ['--port', String(port)], {
        cwd: dir.path,
        env: { SLUICE_LOG_LEVEL: 'silent' },
      });
      expect((await child.exited).code).toBe(1);
      expect(child.output()).toContain(`127.0.0.1:${port} is already in use`);
      expect(child.output()).not.toMatch(/\n\s+at /);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});
