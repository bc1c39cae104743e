import type { TransferView as CoreTransferView, TransferRequestInput, TransferState } from '@sluice/core';
import { ClientErrorCode, SluiceClientError } from './errors.js';
import { backoffMs, delay, type HttpTarget, requestJson } from './http.js';

/** A value as it travels in JSON: dates become ISO strings. */
export type Wire<T> = T extends Date
  ? string
  : T extends Array<infer U>
    ? Array<Wire<U>>
    : T extends object
      ? { [K in keyof T]: Wire<T[K]> }
      : T;

/**
 * A transfer record as the control API returns it (core's `TransferView`: dates as ISO strings, `owner`
 * `{nodeId, address}`, `progress` when the answering node runs it); `resumed` when a submit took it over.
 */
export type TransferView = CoreTransferView & { resumed?: boolean };

/** What `submit` answered: 201 created, 200 the stored outcome, 202 running (elsewhere) or accepted. */
export interface Submitted {
  status: 200 | 201 | 202;
  transfer: TransferView | { id: string; mode: 'fire-and-forget'; accepted: true; owner?: string };
}

export interface RetryOptions {
  /** Attempts after the first (default 5). */
  retries?: number | undefined;
  /** First backoff (default 250 ms, doubling, jittered, at most `maxDelayMs`). */
  initialDelayMs?: number | undefined;
  maxDelayMs?: number | undefined;
  signal?: AbortSignal | undefined;
  /** Called before each retry with the error that caused it and the wait (logging, metrics). */
  onRetry?: ((error: SluiceClientError, attempt: number, waitMs: number) => void) | undefined;
}

const TERMINAL: ReadonlySet<TransferState> = new Set(['COMPLETED', 'FAILED', 'TERMINATED']);

/**
 * Transfers of the control API.
 *
 * @example
 * ```ts
 * await client.transfers.submit({ id: 'orders-2026-12-01', source, destination });
 * const done = await client.transfers.wait('orders-2026-12-01', { timeoutMs: 60_000 });
 * ```
 */
export class TransfersClient {
  constructor(private readonly target: HttpTarget) {}

  /**
   * Submits a transfer; the id is its idempotency key (sent as `Idempotency-Key` too). Retries 429 and 503
   * (after `retry-after` when given) and, for idempotent requests, network errors: resending the same id and
   * body is safe. Other refusals throw with the server's `code`.
   */
  async submit(request: TransferRequestInput, options: RetryOptions = {}): Promise<Submitted> {
    const retries = options.retries ?? 5;
    const idempotent = request.mode !== 'fire-and-forget';
    for (let attempt = 0; ; attempt += 1) {
      try {
        const { status, body } = await requestJson<Submitted['transfer']>(
          this.target,
          'POST',
          '/v1/transfers',
          request,
          { 'idempotency-key': request.id },
          options.signal,
        );
        return { status: status as Submitted['status'], transfer: body };
      } catch (err) {
        if (!(err instanceof SluiceClientError) || attempt >= retries) throw err;
        // A request that got no answer (a network error, or none in time) may have been taken: only an idempotent
        // one is resent — the same id and body get its stored answer, never a second run.
        const unanswered = err.code === ClientErrorCode.NETWORK_ERROR || err.code === ClientErrorCode.TIMEOUT;
        const retryable = err.status === 429 || err.status === 503 || (idempotent && unanswered);
        if (!retryable) throw err;
        const wait =
          err.retryAfterMs ?? backoffMs(attempt, options.initialDelayMs ?? 250, options.maxDelayMs ?? 10_000);
        options.onRetry?.(err, attempt + 1, wait);
        await delay(wait, options.signal);
      }
    }
  }

  /**
   * The transfer's record (`TRANSFER_NOT_FOUND` when there is none). `timeoutMs` overrides the client's for this
   * request.
   */
  async get(
    id: string,
    options: { signal?: AbortSignal | undefined; timeoutMs?: number | undefined } = {},
  ): Promise<TransferView> {
    const { body } = await requestJson<TransferView>(
      this.target,
      'GET',
      `/v1/transfers/${encodeURIComponent(id)}`,
      undefined,
      {},
      options.signal,
      options.timeoutMs,
    );
    return body;
  }

  /**
   * Polls until the transfer is `COMPLETED`, `FAILED` or `TERMINATED` and returns that record; `TIMEOUT` after
   * `timeoutMs` (default: no limit). Network errors while polling are retried.
   */
  async wait(
    id: string,
    options: {
      intervalMs?: number | undefined;
      timeoutMs?: number | undefined;
      signal?: AbortSignal | undefined;
    } = {},
  ): Promise<TransferView> {
    const deadline =
      options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
    const interval = options.intervalMs ?? 250;
    const timedOut = () =>
      new SluiceClientError(ClientErrorCode.TIMEOUT, `Transfer "${id}" did not finish in time`);
    for (;;) {
      // Each poll ends by the deadline too: a server that stopped answering must not hold `wait` past it.
      const left = deadline - Date.now();
      const pollMs = this.target.timeoutMs > 0 ? Math.min(this.target.timeoutMs, left) : left;
      try {
        const transfer = await this.get(id, {
          ...options,
          timeoutMs: Number.isFinite(pollMs) ? Math.max(1, pollMs) : 0,
        });
        if (TERMINAL.has(transfer.state)) return transfer;
      } catch (err) {
        if (!(err instanceof SluiceClientError)) throw err;
        if (err.code === ClientErrorCode.TIMEOUT && Date.now() >= deadline) throw timedOut();
        // A poll is a GET: one that got no answer is simply asked again.
        if (err.code !== ClientErrorCode.NETWORK_ERROR && err.code !== ClientErrorCode.TIMEOUT) throw err;
      }
      if (Date.now() + interval > deadline) throw timedOut();
      await delay(interval, options.signal);
    }
  }

  /**
   * One page of transfer records, filtered by `state` and/or `owner` (a node id); `next` is the cursor of the
   * following page (`null` at the end). `limit` is capped by the server's `limits.pageSizeMax`.
   */
  async list(
    options: {
      state?: TransferState | undefined;
      owner?: string | undefined;
      limit?: number | undefined;
      cursor?: string | undefined;
      signal?: AbortSignal | undefined;
    } = {},
  ): Promise<{ records: TransferView[]; next: string | null }> {
    const params = new URLSearchParams();
    if (options.state !== undefined) params.set('state', options.state);
    if (options.owner !== undefined) params.set('owner', options.owner);
    if (options.limit !== undefined) params.set('limit', String(options.limit));
    if (options.cursor !== undefined) params.set('cursor', options.cursor);
    const query = params.size > 0 ? `?${params}` : '';
    const { body } = await requestJson<{ records: TransferView[]; next: string | null }>(
      this.target,
      'GET',
      `/v1/transfers${query}`,
      undefined,
      {},
      options.signal,
    );
    return body;
  }

  /** Terminates the transfer (routed to its owner); answers its record. */
  async terminate(id: string, options: { signal?: AbortSignal | undefined } = {}): Promise<TransferView> {
    const { body } = await requestJson<TransferView>(
      this.target,
      'POST',
      `/v1/transfers/${encodeURIComponent(id)}/terminate`,
      undefined,
      {},
      options.signal,
    );
    return body;
  }
}
