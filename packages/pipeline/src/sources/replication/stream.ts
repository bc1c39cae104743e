import { SourceError } from '@sluice/core';
import { LogicalReplicationService, type Pgoutput, PgoutputPlugin } from 'pg-logical-replication';
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

/**
 * One `START_REPLICATION` session of `pgoutput` through `pg-logical-replication`, turned into a pulled queue.
 *
 * What this wrapper decides (after reading the library's code): acknowledgements are manual and never automatic
 * (`acknowledge.auto: false` and `timeoutSeconds: 0` — the library's timer would otherwise confirm the last
 * *received* LSN, beyond what the cache committed); the library reports `lsn + 1` as flushed, so `confirm(lsn)`
 * passes `lsn − 1` and PostgreSQL's `confirmed_flush_lsn` is exactly the committed transaction's end (a commit
 * record starting right there must not be skipped on restart); column values are parsed with the pipeline's own
 * parsers (set on each relation as it arrives, before any row of it is parsed; a domain column by its base type,
 * as a query's result names it), so streamed rows read exactly like snapshot rows; and messages are consumed
 * synchronously in arrival order (no `flowControl`, whose queue lets keepalives overtake data), with the socket
 * paused above `highWater` buffered messages.
 */
export class ReplicationStream {
  private readonly service: LogicalReplicationService;
  private readonly queue: StreamItem[] = [];
  private head = 0;
  private waiter: (() => void) | null = null;
  private paused = false;
  private timer: NodeJS.Timeout | null = null;
  private confirmedLsn: string;
  private closed = false;

  constructor(private readonly options: ReplicationStreamOptions) {
    this.confirmedLsn = options.startLsn;
    this.service = new LogicalReplicationService(
      // Named, so that another app-server finding the slot busy knows whose stream it is (holder.ts).
      {
        connectionString: options.url,
        connectionTimeoutMillis: 10_000,
        application_name: replicationApplicationName(),
      },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
    );
    this.service.on('data', (_lsn: string, message: Pgoutput.Message) => {
      if (message.tag === 'relation')
        for (const column of message.columns)
          column.parser = textParser(options.baseTypes?.get(column.typeOid) ?? column.typeOid);
      this.push({ kind: 'message', message });
    });
    this.service.on('heartbeat', (lsn: string, _time: number, shouldRespond: boolean) => {
      this.push({ kind: 'keepalive', lsn });
      if (shouldRespond) this.sendStatus(false);
    });
    this.service.on('error', (err: Error) => this.fail(err));
  }

  /** Starts streaming from `startLsn`; failures arrive as a `failed` item. */
  start(): void {
    const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: [this.options.publication] });
    this.service.subscribe(plugin, this.options.slot, this.options.startLsn).then(
      () => this.fail(new Error('the replication stream ended')),
      (err: unknown) => this.fail(err instanceof Error ? err : new Error(String(err))),
    );
    this.timer = setInterval(() => this.sendStatus(true), this.options.keepaliveMs);
    this.timer.unref();
  }

  /**
   * The next item, or null once `signal` aborted; with `idleMs`, `IDLE` when nothing arrived within that time
   * (so a reader can act on what it holds while the connection is quiet).
   */
  async next(signal: AbortSignal, idleMs?: number): Promise<StreamItem | typeof IDLE | null> {
    while (this.head >= this.queue.length) {
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
    if (this.paused && this.buffered() <= this.options.highWater / 2) this.setPaused(false);
    return item;
  }

  /** Items buffered and not yet taken. */
  buffered(): number {
    return this.queue.length - this.head;
  }

  /** Reports `lsn` (the end of a transaction the cache committed, or a keepalive position) as flushed. */
  confirm(lsn: string): void {
    this.confirmedLsn = lsn;
    this.sendStatus(false);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.service.destroy().catch(() => {});
  }

  private sendStatus(ping: boolean): void {
    if (this.closed) return;
    // The library adds one byte to what it is given (see the class comment).
    void this.service.acknowledge(previousLsn(this.confirmedLsn), ping).catch(() => {});
  }

  private push(item: StreamItem): void {
    if (this.closed) return;
    this.queue.push(item);
    if (!this.paused && this.buffered() >= this.options.highWater) this.setPaused(true);
    this.waiter?.();
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.push({
      kind: 'failed',
      // Retryable: a lost replication connection (PostgreSQL restarted, a network cut) is not the run's fault; a
      // transfer resumes from its checkpoint (an endpoint's supervisor retries every failure anyway).
      error: new SourceError(`Logical replication from slot ${this.options.slot}: ${err.message}`, {
        cause: err,
        details: { slot: this.options.slot, retryable: true },
      }),
    });
  }

  private setPaused(paused: boolean): void {
    this.paused = paused;
    // The socket of the library's pg connection (the same one its own flow control pauses).
    const socket = (this.service as unknown as { _connection?: { stream?: NodeJS.ReadableStream } })
      ._connection?.stream;
    if (paused) socket?.pause();
    else socket?.resume();
  }
}
