/**
 * What an operator sees from `sluice-app-server --check` (a real process) for configuration mistakes found by
 * following the documentation: a secret never printed, and URLs of the wrong kind refused before start.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN } from './helpers.js';

async function check(yaml: string, env: Record<string, string> = {}) {
  await using dir = await tempDir('sluice-check-');
  const file = join(dir.path, 'sluice.yaml');
  await writeFile(file, yaml);
  await using child = spawnTs(BIN, ['--config', file, '--check'], { cwd: dir.path, env });
  const exit = await child.exited;
  return { code: exit.code, output: child.output() };
}

describe('--check of configuration mistakes', () => {
  it('defect: a bad SLUICE_STORE_URL printed its password in the CONFIG_INVALID message', async () => {
    const { code, output } = await check('node: { id: n1 }\n', {
      SLUICE_STORE_URL: 'mysql://sluice:s3cret-pw@db:3306/sluice',
    });
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('store: must be "sqlite:<path>" or a postgres:// URL');
    expect(output).toContain('SLUICE_STORE_URL');
    expect(output).not.toContain('s3cret-pw');
    expect(output).toContain('mysql://sluice:***@db:3306/sluice');
  }, 60_000);

  it('defect: a postgres connection whose url is not a PostgreSQL URL passed --check', async () => {
    const { code, output } = await check(
      'connections:\n  warehouse: { type: postgres, url: "mysql://reader:pw@db:3306/sales" }\n',
    );
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('connections.warehouse.url: must be a postgres:// or postgresql:// URL');
    expect(output).not.toContain('reader:pw');
  }, 60_000);

  it('defect: a nats URL with a mistyped scheme passed --check and failed at start as a DNS error', async () => {
    const { code, output } = await check('nats: "htp://127.0.0.1:4222"\n');
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('nats: must be a nats:// or tls:// URL (or host:port)');
    const env = await check('node: { id: n1 }\n', { SLUICE_NATS_URL: 'http://user:n4ts-pw@127.0.0.1:4222' });
    expect(env.code).toBe(1);
    expect(env.output).toContain('SLUICE_NATS_URL');
    expect(env.output).not.toContain('n4ts-pw');
    // The forms the client takes still pass.
    for (const nats of ['nats://127.0.0.1:4222', 'tls://nats.example:4222', '127.0.0.1:4222'])
      expect((await check(`nats: "${nats}"\n`)).code).toBe(0);
  }, 60_000);

  it('defect: node.port and api.port set to the same port passed --check; the api-server then found its port taken', async () => {
    const { code, output } = await check('node: { port: 7171 }\napi: { port: 7171 }\n');
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('api.port: 7171 is node.port too');
    // Set by the environment, as `SLUICE_PORT=8080 pnpm start` does against api.port's default.
    const env = await check('node: { id: n1 }\n', { SLUICE_PORT: '8080' });
    expect(env.code).toBe(1);
    expect(env.output).toContain('api.port: 8080 is node.port too');
    // Apart where they cannot meet: other addresses, or ports the system picks.
    for (const yaml of [
      'node: { host: 127.0.0.1, port: 7171 }\napi: { host: 127.0.0.2, port: 7171 }\n',
      'node: { port: 0 }\napi: { port: 0 }\n',
    ])
      expect((await check(yaml)).code, yaml).toBe(0);
  }, 60_000);

  it('defect: control.auth with no token and no jwtSecret passed --check and left the control API open to anyone', async () => {
    for (const auth of ['{}', '{ tokens: [] }']) {
      const { code, output } = await check(`control: { auth: ${auth} }\n`);
      expect({ auth, code }).toEqual({ auth, code: 1 });
      expect(output).toContain('CONFIG_INVALID');
      expect(output).toContain(
        'control.auth: needs tokens or a jwtSecret (leave control.auth out to run the control API without auth)',
      );
    }
    // Either credential alone still passes.
    for (const auth of [
      '{ tokens: [a-control-token-of-24-chars] }',
      '{ jwtSecret: a-secret-of-24-characters }',
    ])
      expect((await check(`control: { auth: ${auth} }\n`)).code, auth).toBe(0);
  }, 60_000);

  it("defect: api.auth and control.auth sharing one jwtSecret passed --check, so a reader's row-filtered query token was an operator token on the control API", async () => {
    const secret = 'one-secret-for-both-apis-0123456789';
    const { code, output } = await check(
      `api: { auth: { jwtSecret: "${secret}" } }\ncontrol: { auth: { jwtSecret: "${secret}" } }\n`,
    );
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain(
      "control.auth.jwtSecret: is api.auth.jwtSecret too: every query-API token (a reader's, whatever its endpoints and row filters) would be a control token",
    );
    expect(output).not.toContain(secret);
    // A secret of each, or only one of the two APIs with JWTs, still passes.
    for (const yaml of [
      `api: { auth: { jwtSecret: "${secret}" } }\ncontrol: { auth: { jwtSecret: "another-secret-0123456789" } }\n`,
      `api: { auth: { jwtSecret: "${secret}" } }\ncontrol: { auth: { tokens: [a-control-token-of-24-chars] } }\n`,
      `control: { auth: { jwtSecret: "${secret}" } }\n`,
    ])
      expect((await check(yaml)).code, yaml).toBe(0);
  }, 60_000);

  it('defect: node.host / api.host that are not a listen address passed --check; the app-server then died with a getaddrinfo stack', async () => {
    const message =
      'must be an IP address or a host name, without a scheme or port (e.g. 0.0.0.0, ::, 10.0.0.5, localhost)';
    for (const [yaml, key] of [
      ['node: { host: "http://0.0.0.0" }\n', 'node.host'],
      ['node: { host: "localhost:7070" }\n', 'node.host'],
      ['api: { host: "[::1]:8080" }\n', 'api.host'],
      ['api: { host: "my host" }\n', 'api.host'],
    ]) {
      const { code, output } = await check(yaml as string);
      expect({ yaml, code }).toEqual({ yaml, code: 1 });
      expect(output).toContain('CONFIG_INVALID');
      expect(output).toContain(`${key}: ${message}`);
    }
    for (const host of ['0.0.0.0', '"::"', '"[::1]"', '10.0.0.5', 'localhost', 'sluice-1.internal.example'])
      expect((await check(`node: { host: ${host} }\napi: { host: ${host} }\n`)).code, host).toBe(0);
  }, 90_000);

  it('defect: control.maxStreamsPerClient above control.maxStreams passed --check, a per-client bound that can never refuse', async () => {
    // The process bound is checked first, so a client can never reach a per-client bound above it.
    const { code, output } = await check('control: { maxStreams: 8, maxStreamsPerClient: 32 }\n');
    expect(code).toBe(1);
    expect(output).toContain('sluice-app-server: CONFIG_INVALID: Invalid configuration in');
    expect(output).toContain(
      'control.maxStreamsPerClient: 32 is more than control.maxStreams (8): one client can never hold more endpoint streams than the app-server accepts in all, so this bound would never refuse; lower it or raise control.maxStreams',
    );
    expect(output).not.toMatch(/\n\s+at /);
    // Left out, the per-client bound is its default, or the process bound when that is lower.
    for (const [yaml, perClient] of [
      ['control: { maxStreams: 8 }\n', 8],
      ['control: { maxStreams: 8, maxStreamsPerClient: 8 }\n', 8],
      ['control: { maxStreams: 64 }\n', 16],
    ] as const) {
      const accepted = await check(yaml);
      expect({ yaml, code: accepted.code }).toEqual({ yaml, code: 0 });
      expect(JSON.parse(accepted.output).control).toMatchObject({ maxStreamsPerClient: perClient });
    }
  }, 60_000);
});
