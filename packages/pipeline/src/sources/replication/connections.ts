/**
 * The replication source's ordinary PostgreSQL connections (the replication stream has its own, in `stream.ts`):
 * one-off queries (setup, resume checks, slot waits, discard) and the periodic tasks that run beside the stream
 * (the lag probe and the heartbeat). Every connection opened is tracked, so closing the source ends them all.
 */
import { SourceError } from '@sluice/core';
import type pg from 'pg';
import { connectPostgres } from '../../pg.js';

/** A task repeated on a connection of its own; `stop` ends it and releases the connection. */
export interface PeriodicTask {
  stop(): void;
}

/**
 * Connections to the source database.
 *
 * @example
 * ```ts
 * const connections = new SourceConnections(url);
 * const lsn = await connections.withClient((c) => c.query('SELECT pg_current_wal_lsn()'));
 * const probe = connections.every(1_000, (c) => c.query('SELECT 1').then(() => {}));
 * probe.stop();
 * await connections.closeAll();
 * ```
 */
export class SourceConnections {
  readonly #open = new Set<pg.Client>();

  constructor(private readonly url: string) {}

  /** A new connection. An unreachable server is a retryable `SOURCE_FAILED` (a transfer resumes later). */
  async connect(): Promise<pg.Client> {
    try {
      const client = await connectPostgres(this.url);
      this.#open.add(client);
      return client;
    } catch (err) {
      // Retryable: PostgreSQL restarting or unreachable for now; a transfer resumes from its checkpoint.
      throw new SourceError(`Cannot connect to PostgreSQL: ${(err as Error).message}`, {
        cause: err,
        details: { retryable: true },
      });
    }
  }

  async release(client: pg.Client): Promise<void> {
    this.#open.delete(client);
    await client.end().catch(() => {});
  }

  /** Runs `fn` on a connection of its own, closed afterwards. */
  async withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = await this.connect();
    try {
      return await fn(client);
    } finally {
      await this.release(client);
    }
  }

  /**
   * Runs `task` every `everyMs` on a connection of its own (opened on first use). A failed run is skipped and its
   * connection dropped; the next run reconnects. Runs never overlap.
   */
  every(everyMs: number, task: (client: pg.Client) => Promise<void>): PeriodicTask {
    let client: pg.Client | null = null;
    let busy = false;
    let stopped = false;
    const tick = async () => {
      if (busy || stopped) return;
      busy = true;
      try {
        client ??= await this.connect();
        await task(client);
      } catch {
        if (client !== null) await this.release(client);
        client = null;
      } finally {
        busy = false;
        if (stopped && client !== null) await this.release(client);
      }
    };
    const timer = setInterval(() => void tick(), everyMs);
    timer.unref();
    void tick();
    return {
      stop: () => {
        stopped = true;
        clearInterval(timer);
        if (!busy && client !== null) void this.release(client);
      },
    };
  }

  /** Ends every connection still open. */
  async closeAll(): Promise<void> {
    await Promise.all([...this.#open].map((client) => this.release(client)));
  }
}
