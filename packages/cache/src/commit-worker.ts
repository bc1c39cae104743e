/**
 * The commit thread's entry (see commit-thread.ts): runs each {@link SpilledCommitJob} it is sent in a write
 * transaction of the generation's environment — the same LMDB environment the writer's thread has open, which lmdb-js
 * shares between the threads of a process — and answers with what the commit left, or why it failed.
 */
import { parentPort } from 'node:worker_threads';
import { SluiceError } from '@sluice/core';
import { cacheDbs } from './cache-dbs.js';
import { ensureChangeLog } from './change-log.js';
import type { CommitReply, CommitRequest, FailureDescription } from './commit-thread.js';
import { SharedEnv } from './lmdb-env.js';
import { commitSpilledSets, type SpilledCommitOutcome } from './spilled-commit.js';
import { StagingArea } from './staging.js';

/** What crosses back of an error: enough for the writer's thread to rethrow it as what it was. */
function describe(err: unknown): FailureDescription {
  if (SluiceError.isInstance(err))
    return { sluice: true, code: err.code, message: err.message, details: err.details ?? null };
  const e = err as { message?: unknown; code?: unknown } | null;
  const code = e?.code;
  return {
    sluice: false,
    message: String(e?.message ?? err),
    code: typeof code === 'string' || typeof code === 'number' ? code : null,
  };
}

async function run({ id, job }: CommitRequest): Promise<CommitReply> {
  const env = new SharedEnv(job.path, false);
  try {
    const dbs = cacheDbs(env, job.schema);
    // Opened before the transaction: lmdb-js opens a named database outside write transactions.
    ensureChangeLog(dbs);
    const staging = new StagingArea(dbs);
    let outcome: SpilledCommitOutcome | undefined;
    env.root.transactionSync(() => {
      outcome = commitSpilledSets(dbs, staging, job);
    });
    return { id, kind: 'landed', outcome: outcome! };
  } catch (err) {
    return { id, kind: 'failed', error: describe(err) };
  } finally {
    // Closes this thread's handle only: the environment stays open for the writer's thread.
    await env.root.close();
  }
}

const port = parentPort;
if (port === null) throw new Error('commit-worker.ts runs as a worker thread (see commit-thread.ts)');
port.on('message', (request: CommitRequest) => {
  void run(request).then(
    (reply) => port.postMessage(reply),
    (err: unknown) => port.postMessage({ id: request.id, kind: 'failed', error: describe(err) }),
  );
});
