/**
 * The thread a writer's big commits run on. A commit of a transaction that outgrew memory applies every change of it
 * inside one LMDB write transaction (spilled-commit.ts) — tens of seconds for a million-row UPDATE — and lmdb-js runs
 * a write transaction synchronously on the thread that opens it. On the writer's own thread that froze its event
 * loop: an app-server stopped answering HTTP (health checks failed), stopped heartbeating its transfers' leases and
 * its other endpoints' pipelines stood still. On this thread the writer's event loop keeps turning while it waits.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { type ErrorCode, SluiceError, StaleEpochError } from '@sluice/core';
import type { SpilledCommitJob, SpilledCommitOutcome } from './spilled-commit.js';

/** A job sent to the commit thread. */
export interface CommitRequest {
  id: number;
  job: SpilledCommitJob;
}

/** An error as it crosses back from the commit thread. */
export type FailureDescription =
  | { sluice: true; code: ErrorCode; message: string; details: Record<string, unknown> | null }
  | { sluice: false; message: string; code: string | number | null };

/** The commit thread's answer to a {@link CommitRequest}. */
export type CommitReply =
  | { id: number; kind: 'landed'; outcome: SpilledCommitOutcome }
  | { id: number; kind: 'failed'; error: FailureDescription };

/**
 * The worker's file and how to start it: from the published build the compiled `commit-worker.js` (or `.cjs`) beside
 * this bundle; from the TypeScript sources (tests, `--conditions=@sluice/source`) `commit-worker.ts`, through a
 * module that registers tsx in the new thread first (a worker does not take `--import tsx` from its `execArgv`).
 */
function workerStart(): { file: URL; execArgv?: string[] } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    const source = new URL('./commit-worker.ts', here).href;
    const boot = `import { register } from ${JSON.stringify(tsxApi(here))}; register(); await import(${JSON.stringify(source)});`;
    return {
      file: new URL(`data:text/javascript,${encodeURIComponent(boot)}`),
      execArgv: ['--conditions=@sluice/source'],
    };
  }
  const file = new URL(here.endsWith('.cjs') ? './commit-worker.cjs' : './commit-worker.js', here);
  if (!existsSync(fileURLToPath(file)))
    throw new Error(`the commit thread's file ${file.pathname} is missing`);
  return { file };
}

/** The file URL of tsx's ESM API (`tsx/esm/api`'s `import` export), resolved from `from`. */
function tsxApi(from: string): string {
  const manifest = createRequire(from).resolve('tsx/package.json');
  const exports = JSON.parse(readFileSync(manifest, 'utf8')).exports as Record<
    string,
    { import: { default: string } }
  >;
  return pathToFileURL(join(dirname(manifest), exports['./esm/api']!.import.default)).href;
}

/** The error a failed commit rethrows on the writer's thread: what it was on the commit thread. */
function rebuild(error: FailureDescription, job: SpilledCommitJob): Error {
  if (error.sluice) {
    if (error.code === 'STALE_EPOCH' && job.fence !== undefined)
      return new StaleEpochError(job.fence.writer, job.fence.epoch, { details: error.details ?? {} });
    return new SluiceError({ code: error.code, message: error.message, details: error.details ?? undefined });
  }
  // Native LMDB and file-system errors keep their message and code (a full disk is recognised by them).
  return Object.assign(new Error(error.message), error.code === null ? {} : { code: error.code });
}

/**
 * One writer's commit thread, started at its first big commit; jobs run one at a time, in order.
 *
 * @example
 * ```ts
 * await using thread = new CommitThread();
 * const { state } = await thread.run(job); // the writer's event loop turns meanwhile
 * ```
 */
export class CommitThread implements AsyncDisposable {
  #worker: Worker | null = null;
  #pending = new Map<
    number,
    { job: SpilledCommitJob; resolve: (o: SpilledCommitOutcome) => void; reject: (e: Error) => void }
  >();
  #nextId = 0;

  /** Runs `job` on the commit thread; settles when its transaction has committed (or failed, nothing written). */
  run(job: SpilledCommitJob): Promise<SpilledCommitOutcome> {
    const worker = this.#started();
    const id = ++this.#nextId;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { job, resolve, reject });
      // A commit under way keeps the process alive, as the same commit on the writer's thread would.
      worker.ref();
      worker.postMessage({ id, job } satisfies CommitRequest);
    });
  }

  #started(): Worker {
    if (this.#worker !== null) return this.#worker;
    const { file, execArgv } = workerStart();
    const worker = new Worker(file, execArgv === undefined ? {} : { execArgv });
    worker.unref();
    worker.on('message', (reply: CommitReply) => this.#settle(reply));
    worker.on('error', (err) => this.#lost(worker, `the commit thread failed: ${err.message}`));
    worker.on('exit', (code) => this.#lost(worker, `the commit thread exited (code ${code})`));
    this.#worker = worker;
    return worker;
  }

  #settle(reply: CommitReply): void {
    const pending = this.#pending.get(reply.id);
    if (pending === undefined) return;
    this.#pending.delete(reply.id);
    if (this.#pending.size === 0) this.#worker?.unref();
    if (reply.kind === 'landed') pending.resolve(reply.outcome);
    else pending.reject(rebuild(reply.error, pending.job));
  }

  /** The thread is gone: what it was running failed (LMDB aborted its transaction); the next job starts a new one. */
  #lost(worker: Worker, why: string): void {
    if (this.#worker !== worker) return;
    this.#worker = null;
    for (const { reject } of this.#pending.values()) reject(new Error(why));
    this.#pending.clear();
  }

  /** Stops the thread. Call only when no job is under way (the writer awaits its commits first). */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    if (worker !== null) await worker.terminate();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
