/**
 * `sluice-client types` against a real api-server: the generated row types are the serving schema's (checked by
 * compiling code that uses them with the TypeScript compiler), and `createClient<Endpoints>` types `endpoint(name)`.
 */
import { spawnSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { signJwt, spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { createClient, type EndpointClient } from '../src/index.js';
import { item, startApi, startWriter } from './servers.js';

const BIN = fileURLToPath(new URL('../src/bin.ts', import.meta.url));
const TSC = createRequire(import.meta.url).resolve('typescript/bin/tsc');

/** Runs `sluice-client …` as a real process; its exit code and output. */
async function sluiceClient(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; output: string }> {
  const child = spawnTs(BIN, args, { env });
  const { code } = await child.exited;
  return { code, output: child.output() };
}

describe('sluice-client types', () => {
  it('writes the row types of the serving schema; code that misuses them does not compile', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)]);
    await using api = await startApi(dir.path, writer.root);
    const out = join(dir.path, 'sluice-types.ts');
    const run = await sluiceClient(['types', '--url', api.url, '--out', out]);
    expect(run.code, run.output).toBe(0);
    const source = await readFile(out, 'utf8');
    // The test endpoint's schema: id integer (key), value number, category string.
    expect(source).toContain(
      [
        'export type Items = {',
        '  id: number;',
        '  category?: string | null;',
        '  value?: number | null;',
        '};',
      ].join('\n'),
    );
    await writeFile(
      join(dir.path, 'use.ts'),
      [
        "import type { Endpoints, Items } from './sluice-types.js';",
        "const full: Items = { id: 1, value: 2.5, category: 'a' };",
        'const lean: Endpoints["items"] = { id: 2, value: null };',
        '// @ts-expect-error the key is required',
        'const keyless: Items = { value: 1 };',
        '// @ts-expect-error value is a number',
        "const wrong: Items = { id: 3, value: 'x' };",
        '// @ts-expect-error no such field',
        'const extra: Items = { id: 4, nope: true };',
        'export const all = [full, lean, keyless, wrong, extra];',
        '',
      ].join('\n'),
    );
    const tsc = spawnSync(
      process.execPath,
      [TSC, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', 'use.ts'],
      { cwd: dir.path, encoding: 'utf8' },
    );
    // An unused @ts-expect-error (a misuse the types let through) fails the compile too.
    expect(tsc.status, `${tsc.stdout}${tsc.stderr}`).toBe(0);

    const usage = await sluiceClient(['types']);
    expect(usage.code).toBe(2);
    expect(usage.output).toMatch(/--url is required/);
  });

  it('defect: "--endpoint nope" said the server serves no such endpoint "to this token" when no token was given', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)]);
    const secret = 'client-types-secret-0123456789';
    await mkdir(join(dir.path, 'open'));
    await mkdir(join(dir.path, 'authed'));
    await using open = await startApi(join(dir.path, 'open'), writer.root);
    await using authed = await startApi(join(dir.path, 'authed'), writer.root, {
      auth: { jwtSecret: secret },
    });

    // No token (none given, none in SLUICE_TOKEN): the server's answer is what it serves, to anyone.
    const untokened = await sluiceClient(['types', '--url', open.url, '--endpoint', 'nope'], {
      SLUICE_TOKEN: '',
    });
    expect(untokened.code).toBe(1);
    expect(untokened.output).toContain(
      `sluice-client: ${open.url} serves no endpoint "nope" (it serves: items)`,
    );
    expect(untokened.output).not.toMatch(/token/);

    // A token that may read another endpoint only: the server lists what it serves to that token.
    const token = signJwt(secret, { endpoints: ['other'] });
    const tokened = await sluiceClient([
      'types',
      '--url',
      authed.url,
      '--token',
      token,
      '--endpoint',
      'items',
    ]);
    expect(tokened.code).toBe(1);
    expect(tokened.output).toContain(
      `sluice-client: ${authed.url} serves no endpoint "items" to this token (it serves: none)`,
    );
    // The same token from SLUICE_TOKEN.
    const fromEnv = await sluiceClient(['types', '--url', authed.url, '--endpoint', 'items'], {
      SLUICE_TOKEN: token,
    });
    expect(fromEnv.code).toBe(1);
    expect(fromEnv.output).toContain(`serves no endpoint "items" to this token (it serves: none)`);
  });

  it('createClient<Endpoints> types endpoint(name) by its row type; other names take one or stay plain', () => {
    type Items = { id: number; value?: number | null };
    interface Endpoints {
      items: Items;
    }
    const client = createClient<Endpoints>({ queryUrl: 'http://127.0.0.1:1' });
    expectTypeOf(client.endpoint('items')).toEqualTypeOf<EndpointClient<Items>>();
    expectTypeOf(client.endpoint<{ n: number }>('other')).toEqualTypeOf<EndpointClient<{ n: number }>>();
    expectTypeOf(createClient({}).endpoint('any')).toEqualTypeOf<EndpointClient<Record<string, unknown>>>();
    expect(client.endpoint('items').name).toBe('items');
  });
});
