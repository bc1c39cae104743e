import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { SourceError } from '@sluice/core';
import { type Pgoutput, PgoutputPlugin } from 'pg-logical-replication';
import { textParser } from '../../pg.js';
import { replicationApplicationName } from './holder.js';
import { previousLsn } from './lsn.js';

/** What {@link ReplicationStream.next} answers when nothing arrived within the time it was given. */
export const IDLE = { kind: 'idle' } as const;

/** What the replication connection delivered, in arrival order. */
export type StreamItem =
  | { kind: 'message'; message: Pgoutput.Message }
  /** A primary keepalive: the server has sent everything before `lsn`. */
  | { kind: 'keepalive'; lsn: string }
  | { kind: 'failed'; error: Error };

export interface ReplicationStreamOptions {
  url: string;
  slot: string;
  publication: string;
  /** Where to start: the end of the last transaction the cache committed (or the slot's consistent point). */
  startLsn: string;
  /** How often to send a standby status update asking for a keepalive (idle slots advance through it). */
  keepaliveMs: number;
  /** Messages buffered before the socket is paused (backpressure). */
  highWater: number;
  /**
   * Domain type OIDs → their base type's (`domainBaseTypes`): a relation message names a domain column by the
   * domain, a query's result by the base type, and both must read alike.
   */
  baseTypes?: ReadonlyMap<number, number>;
}

/** What the connection's thread (replication-worker.mjs) sends: see the protocol at the top of that file. */
type WorkerMessage =
  | {
      kind: 'batch';
      bytes: ArrayBuffer;
      entries: Array<[kind: 'w' | 'k', lsn: string, start: number, end: number]>;
    }
  | { kind: 'started' }
  | { kind: 'failed'; message: string }
  | { kind: 'closed' };

/**
 * The worker's file: beside this module in the sources; from the published build (dist/), in the `src` the package
 * ships too.
 */
function workerFile(): URL {
  const beside = new URL('./replication-worker.mjs', import.meta.url);
  if (existsSync(fileURLToPath(beside))) return beside;
  return new URL('../src/sources/replication/replication-worker.mjs', import.meta.url);
}

/**
 * One `START_REPLICATION` session of `pgoutput`, turned into a pulled queue.
 *
 * The connection lives on a thread of its own (replication-worker.mjs, through `pg-logical-replication`): it reads
 * the socket, answers the server's keepalives and sends status updates whatever this thread is doing — a cache
 * commit blocks this one while it writes what memory held (a spilled transaction commits on the cache's commit
 * thread), and PostgreSQL drops a connection silent for `wal_sender_timeout` (each retry then read the transaction
 * from its start again, and was dropped again). Messages
 * cross as bytes, in batches, and are parsed here, where the pipeline's column parsers are.
 *
 * What this wrapper decides (after reading the library's code): acknowledgements are manual and never automatic
 * (the library's timer would otherwise confirm the last *received* LSN, beyond what the cache committed); the
 * library reports `lsn + 1` as flushed, so `confirm(lsn)` passes `lsn − 1` and PostgreSQL's `confirmed_flush_lsn` is
 * exactly the committed transaction's end (a commit record starting right there must not be skipped on restart);
 * column values are parsed with the pipeline's own parsers (set on each relation as it arrives, before any row of it
 * is parsed; a domain column by its base type, as a query's result names it), so streamed rows read exactly like
 * snapshot rows; messages are taken in arrival order (keepalives never overtake data); and the connection's thread
 * stops reading the socket while `highWater` messages are not yet taken here (backpressure).
 */
export class ReplicationStream {
  private worker: Worker | null = null;
  /** Parses pgoutput messages (it keeps the relations, whose columns carry our parsers). */
  private readonly parser = new PgoutputPlugin({ protoVersion: 1, publicationNames: [] });
  private readonly queue: StreamItem[] = [];
  private head = 0;
  private waiter: (() => void) | null = null;
  /** Messages taken from the queue, and how many of them the connection's thread has been told of. */
  private taken = 0;
  private reported = 0;
  private closed = false;
  /** Whether PostgreSQL accepted `START_REPLICATION` (until then another process may still hold the slot). */
  #started = false;
  private exited: Promise<void> = Promise.resolve();

  constructor(private readonly options: ReplicationStreamOptions) {}

  /** Starts streaming from `startLsn` (the connection's thread connects); failures arrive as a `failed` item. */
  start(): void {
    if (this.worker !== null || this.closed) return;
    const { options } = this;
    const worker = new Worker(workerFile(), {
      workerData: {
        url: options.url,
        slot: options.slot,
        publication: options.publication,
        startLsn: options.startLsn,
        // The library adds one byte to what it is given (see the class comment).
        ackLsn: previousLsn(options.startLsn),
        keepaliveMs: options.keepaliveMs,
        highWater: options.highWater,
        // Named, so that another app-server finding the slot busy knows whose stream it is (holder.ts).
        applicationName: replicationApplicationName(),
      },
    });
    this.worker = worker;
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.on('message', (message: WorkerMessage) => this.receive(message));
    worker.on('error', (err) => this.fail(err.message));
    worker.on('exit', (code) => this.fail(`the replication connection's thread exited (code ${code})`));
  }

  /**
   * The next item, or null once `signal` aborted; with `idleMs`, `IDLE` when nothing arrived within that time
   * (so a reader can act on what it holds while the connection is quiet).
   */
  async next(signal: AbortSignal, idleMs?: number): Promise<StreamItem | typeof IDLE | null> {
    while (this.head >= this.queue.length) {
      this.report();
      if (signal.aborted) return null;
      const idle = await new Promise<boolean>((resolve) => {
        const timer = idleMs === undefined ? null : setTimeout(() => settle(true), Math.max(0, idleMs));
        const settle = (timedOut: boolean) => {
          if (timer !== null) clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          this.waiter = null;
          resolve(timedOut);
        };
        const onAbort = () => settle(false);
        signal.addEventListener('abort', onAbort, { once: true });
        this.waiter = () => settle(false);
      });
      if (idle && this.head >= this.queue.length && !signal.aborted) return IDLE;
    }
    if (signal.aborted) return null;
    const item = this.queue[this.head]!;
    this.queue[this.head++] = undefined as never;
    if (this.head > 4096 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    if (item.kind !== 'failed') this.taken++;
    if (this.taken - this.reported >= Math.max(1, this.options.highWater / 4)) this.report();
    return item;
  }

  /**
   * True once PostgreSQL accepted `START_REPLICATION`: the slot is this stream's. Before that the stream only asked
   * for it — another process streaming the slot makes the request fail — so nothing may call the source streaming.
   */
  get started(): boolean {
    return this.#started && !this.closed;
  }

  /** Items buffered and not yet taken. */
  buffered(): number {
    return this.queue.length - this.head;
  }

  /** Reports `lsn` (the end of a transaction the cache committed, or a keepalive position) as flushed. */
  confirm(lsn: string): void {
    // The library adds one byte to what it is given (see the class comment).
    if (!this.closed) this.worker?.postMessage({ kind: 'ack', lsn: previousLsn(lsn) });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const worker = this.worker;
    if (worker === null) return;
    worker.postMessage({ kind: 'close' });
    // The thread ends the connection and exits; one that does not within 5 s is terminated.
    const timer = setTimeout(() => void worker.terminate(), 5_000);
    await this.exited;
    clearTimeout(timer);
  }

  /** Tells the connection's thread how many messages were taken (it reads the socket again below `highWater`). */
  private report(): void {
    if (this.closed || this.reported === this.taken) return;
    this.reported = this.taken;
    this.worker?.postMessage({ kind: 'consumed', count: this.taken });
  }

  private receive(message: WorkerMessage): void {
    if (this.closed) return;
    if (message.kind === 'failed') {
      this.fail(message.message);
      return;
    }
    if (message.kind === 'started') {
      this.#started = true;
      return;
    }
    if (message.kind !== 'batch') return;
    const bytes = Buffer.from(message.bytes);
    for (const [kind, lsn, start, end] of message.entries) {
      if (kind === 'k') {
        this.push({ kind: 'keepalive', lsn });
        continue;
      }
      const parsed = this.parser.parse(bytes.subarray(start, end)) as Pgoutput.Message;
      if (parsed.tag === 'relation')
        for (const column of parsed.columns)
          column.parser = textParser(this.options.baseTypes?.get(column.typeOid) ?? column.typeOid);
      this.push({ kind: 'message', message: parsed });
    }
  }

  private push(item: StreamItem): void {
    if (this.closed) return;
    this.queue.push(item);
    this.waiter?.();
  }

  private fail(message: string): void {
    if (this.closed) return;
    const err = new Error(message);
    this.push({
      kind: 'failed',
      // Retryable: a lost replication connection (PostgreSQL restarted, a network cut) is not the run's fault; a
      // transfer resumes from its checkpoint (an endpoint's supervisor retries every failure anyway).
      error: new SourceError(`Logical replication from slot ${this.options.slot}: ${message}`, {
        cause: err,
        details: { slot: this.options.slot, retryable: true },
      }),
    });
  }
}
