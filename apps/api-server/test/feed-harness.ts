import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveConfig, type SluiceConfigInput } from '@sluice/core';
import { type ChildHandle, spawnTs, type TempDir, tempDir, waitFor } from '@sluice/testkit';
import { type ApiServer, startApiServer } from '../src/index.js';
import { item } from './fixtures/data.js';

export const FEED_WRITER = fileURLToPath(new URL('./fixtures/feed-writer.ts', import.meta.url));

/** A writer process (the app-server's role) plus a way to make it commit, rebuild and stream. */
export interface FeedWriter extends AsyncDisposable {
  readonly root: string;
  readonly child: ChildHandle;
  /** Runs one command and resolves with the serving cache's name once it is done. */
  run(command: Record<string, unknown>): Promise<string>;
}

export async function startFeedWriter(
  dir: TempDir,
  options: { retainRecords?: number; initial?: Record<string, unknown>[] } = {},
): Promise<FeedWriter> {
  const root = join(dir.path, 'data');
  const commands = join(dir.path, 'commands');
  mkdirSync(root, { recursive: true });
  mkdirSync(commands, { recursive: true });
  const args = ['--root', root, '--commands', commands];
  if (options.retainRecords !== undefined) args.push('--retain-records', String(options.retainRecords));
  const child = spawnTs(FEED_WRITER, args);
  await child.waitForLine(/^READY/, 60_000);
  let n = 0;
  const run = async (command: Record<string, unknown>): Promise<string> => {
    n += 1;
    const file = join(commands, `cmd-${n}.json`);
    writeFileSync(`${file}.tmp`, JSON.stringify(command));
    renameSync(`${file}.tmp`, file);
    const line = await child.waitForLine(new RegExp(`^DONE ${n} `), 60_000);
    return line.split(' ')[2] ?? '';
  };
  await run({ op: 'rebuild', records: options.initial ?? range(1, 50).map((id) => item(id, 1)) });
  return {
    root,
    child,
    run,
    [Symbol.asyncDispose]: async () => {
      await child[Symbol.asyncDispose]();
    },
  };
}

/**
 * Runs the writer's `gc` until `generation` is collected (the alias must have left it). Collection skips a generation
 * a reader still has open, so this waits out the api-server closing it once it has switched.
 */
export async function collect(writer: FeedWriter, generation: string): Promise<void> {
  await waitFor(
    async () => {
      await writer.run({ op: 'gc' });
      return writer.child.lines.some((l) => l.startsWith('COLLECTED ') && l.includes(generation));
    },
    { timeoutMs: 20_000, intervalMs: 100, what: `${generation} to be garbage-collected` },
  );
}

/** An api-server in this process (real HTTP, real LMDB read-only, embedded alias-table watch). */
export async function startFeedApi(root: string, config: SluiceConfigInput = {}): Promise<ApiServer> {
  return startApiServer({
    config: resolveConfig({ dataDir: root, logLevel: 'warn', ...config }),
    dataDir: root,
    host: '127.0.0.1',
    port: 0,
    watchMs: 50,
  });
}

export function range(from: number, to: number): number[] {
  const out: number[] = [];
  for (let i = from; i <= to; i += 1) out.push(i);
  return out;
}

export function upsert(record: Record<string, unknown>) {
  return { op: 'upsert', record };
}

export function del(id: number) {
  return { op: 'delete', key: [id] };
}

export { tempDir };
