/**
 * `@sluice/client` as a user installs it: the packed tarball (with core's) in a project outside the monorepo,
 * compiled with `tsc --strict` and run with plain `node` against a real api-server.
 */
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PackedProject, packedProject } from './packed.js';
import { item, startApi, startWriter } from './servers.js';

const ESM_TSCONFIG = JSON.stringify({
  compilerOptions: {
    strict: true,
    module: 'nodenext',
    moduleResolution: 'nodenext',
    target: 'es2022',
    lib: ['es2023', 'esnext.disposable'],
    types: ['node'],
    outDir: 'out',
    skipLibCheck: false,
  },
  include: ['src'],
});

/** Compiles the project's `src` (ESM) and answers `tsc`'s output, failing the test on an error. */
async function compile(project: PackedProject, files: Record<string, string>): Promise<void> {
  await project.write({ 'tsconfig.json': ESM_TSCONFIG, ...files });
  const tsc = await project.tsc('tsconfig.json');
  expect(tsc.output).toBe('');
  expect(tsc.code).toBe(0);
}

describe('@sluice/client from its packed tarball', () => {
  // Packed once for the file (pnpm pack and tsc take seconds); each test writes its own sources into it.
  let project: PackedProject;
  beforeAll(async () => {
    project = await packedProject();
  }, 120_000);
  afterAll(async () => {
    await project?.[Symbol.asyncDispose]();
  });

  it('imports from ESM and CommonJS, type-checks under strict from both, and runs its bin', {
    timeout: 120_000,
  }, async () => {
    await compile(project, {
      'src/main.ts': [
        "import { createClient, ClientErrorCode, SluiceClientError } from '@sluice/client';",
        "const client = createClient({ queryUrl: 'http://127.0.0.1:9', token: process.env.SLUICE_TOKEN });",
        'const failed = await client.endpoint<{ id: number }>("items").count().catch((err: unknown) => err);',
        'console.log(failed instanceof SluiceClientError && failed.code === ClientErrorCode.NETWORK_ERROR);',
        '',
      ].join('\n'),
    });
    expect(await project.node(['out/main.js'])).toEqual({ code: 0, output: 'true\n' });

    await project.write({
      'cjs/package.json': JSON.stringify({ type: 'commonjs' }),
      'cjs/tsconfig.json': JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'node16',
          moduleResolution: 'node16',
          target: 'es2022',
          types: ['node'],
          outDir: 'out',
          skipLibCheck: false,
        },
        include: ['main.ts'],
      }),
      'cjs/main.ts': [
        "import { createClient, SluiceClientError } from '@sluice/client';",
        "const items = createClient({ queryUrl: 'http://127.0.0.1:9' }).endpoint<{ id: number }>('items');",
        'items.get(1).catch((err: unknown) => console.log(err instanceof SluiceClientError, typeof require));',
        '',
      ].join('\n'),
    });
    const cjs = await project.tsc('cjs/tsconfig.json');
    expect(cjs).toEqual({ code: 0, output: '' });
    expect(await project.node(['cjs/out/main.js'])).toEqual({ code: 0, output: 'true function\n' });

    const bin = await project.node(['node_modules/@sluice/client/dist/bin.js', '--help']);
    expect(bin.code).toBe(0);
    expect(bin.output).toContain('Usage: sluice-client types --url');
  });

  it('defect: a row type declared as an interface was refused by endpoint<Row>() ("Index signature for type \'string\' is missing") and became a plain record in createClient<Endpoints>', {
    timeout: 120_000,
  }, async () => {
    await compile(project, {
      'src/rows.ts': [
        "import { createClient, type ChangeEvent, type EndpointClient } from '@sluice/client';",
        'interface City { id: number; name: string; population?: number | null }',
        'interface Endpoints { cities: City }',
        "const client = createClient<Endpoints>({ queryUrl: 'http://127.0.0.1:9' });",
        "const byName: EndpointClient<City> = client.endpoint('cities');",
        "const byArgument: EndpointClient<City> = createClient({}).endpoint<City>('cities');",
        'export async function use(): Promise<string | undefined> {',
        '  const city: City | undefined = await byName.get(1);',
        '  const page = await byArgument.query({ $limit: 1 });',
        '  const first: City | undefined = page.records[0];',
        '  for await (const change of byName.changes()) {',
        "    const event: ChangeEvent<City> = change; if (event.type === 'upsert') return event.record.name;",
        '  }',
        '  // @ts-expect-error a City has no field "nope"',
        '  return city?.nope ?? first?.name;',
        '}',
        '',
      ].join('\n'),
    });
  });

  it('defect: `await using feed = items.changes()` compiled but threw "Object not disposable." on Node 20 — the feed holds a server connection yet had no Symbol.asyncDispose', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1), item(2)]);
    await using api = await startApi(dir.path, writer.root);
    await compile(project, {
      'src/dispose.ts': [
        "import { createClient } from '@sluice/client';",
        'const url = process.argv[2]!;',
        "const items = createClient({ queryUrl: url }).endpoint<{ id: number }>('items');",
        'const subscribers = async () => {',
        '  const metrics = await (await fetch(new URL("/metrics", url))).text();',
        "  return /^sluice_api_change_subscribers (\\d+)$/m.exec(metrics)?.[1] ?? 'none';",
        '};',
        'const seen: string[] = [];',
        '{',
        '  await using feed = items.changes();',
        '  for (let n = 0; n < 2; n += 1) seen.push((await feed.next()).value?.type ?? "end");',
        '  console.log("open:", await subscribers());',
        '}',
        '// The server notices the closed connection on its own time: ask until it has, or give up after 10 s.',
        'let after = await subscribers();',
        "for (let n = 0; n < 100 && after !== '0'; n += 1) {",
        '  await new Promise((resolve) => setTimeout(resolve, 100));',
        '  after = await subscribers();',
        '}',
        'console.log("events:", seen.join(","));',
        'console.log("after dispose:", after);',
        '',
      ].join('\n'),
    });
    const ran = await project.node(['out/dispose.js', api.url]);
    expect(ran.output).toBe('open: 1\nevents: upsert,upsert\nafter dispose: 0\n');
    expect(ran.code).toBe(0);
  });

  it('defect: options read from the environment or left for later (`token: process.env.SLUICE_TOKEN`, `after: lastId`) did not compile under exactOptionalPropertyTypes', {
    timeout: 120_000,
  }, async () => {
    await project.write({
      'exact/tsconfig.json': JSON.stringify({
        compilerOptions: {
          strict: true,
          exactOptionalPropertyTypes: true,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          lib: ['es2023', 'esnext.disposable'],
          types: ['node'],
          noEmit: true,
          skipLibCheck: false,
        },
        include: ['main.ts'],
      }),
      'exact/main.ts': [
        "import { createClient } from '@sluice/client';",
        'const maybe = (name: string): string | undefined => process.env[name];',
        'const signal: AbortSignal | undefined = undefined;',
        'const client = createClient({',
        "  queryUrl: maybe('SLUICE_QUERY_URL'), controlUrl: maybe('SLUICE_CONTROL_URL'),",
        "  token: maybe('SLUICE_TOKEN'), queryToken: maybe('Q'), controlToken: maybe('C'), timeoutMs: undefined,",
        '});',
        "const items = client.endpoint<{ id: number }>('items');",
        'export async function use(lastId: string | undefined): Promise<void> {',
        "  await items.get(1, { signal, minPosition: maybe('POS'), freshnessTimeoutMs: undefined });",
        '  await items.query({ $limit: 1 }, { signal });',
        "  for await (const change of items.changes({ after: lastId, signal, snapshot: undefined, filter: undefined, idleTimeoutMs: undefined, minPosition: maybe('POS') })) {",
        '    if (change.type === "live") break;',
        '  }',
        '  await client.endpoints({ signal });',
        "  const request = { id: maybe('ID') ?? 't1', source: { type: 'file' as const, path: 'a.jsonl' }, destination: { type: 'file' as const, path: 'b.jsonl' } };",
        '  await client.transfers.submit(request as never, { retries: undefined, signal, onRetry: undefined });',
        "  await client.transfers.wait('t1', { timeoutMs: undefined, intervalMs: undefined, signal });",
        "  await client.transfers.get('t1', { signal, timeoutMs: undefined });",
        "  await client.transfers.terminate('t1', { signal });",
        "  await client.control.promote('items', { generation: maybe('G'), signal, timeoutMs: undefined });",
        "  await client.control.rollback('items', { to: maybe('TO'), from: maybe('FROM'), signal });",
        "  await client.control.rebuild('items', { signal });",
        "  await client.control.generations('items', { signal });",
        '  await client.control.nodes({ signal });',
        '  for await (const event of client.control.watchEndpoints({ signal, heartbeatMs: undefined, backoff: { initialMs: undefined } })) {',
        '    if (event.type === "switch") break;',
        '  }',
        '}',
        '',
      ].join('\n'),
    });
    expect(await project.tsc('exact/tsconfig.json')).toEqual({ code: 0, output: '' });
  });
});
