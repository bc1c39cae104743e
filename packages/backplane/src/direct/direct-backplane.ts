import type {
  Logger,
  OwnerAnswer,
  OwnerReport,
  TerminateAnswer,
  UnknownAnswer,
  WhoRunsOptions,
} from '@sluice/core';
import { z } from 'zod';
import { LocalBackplane } from '../shared/local-backplane.js';
import { localOwner, localTerminate } from '../shared/local-first.js';
import {
  checkTimeout,
  checkTransferId,
  DEFAULT_MAX_MESSAGE_BYTES,
  decodeJson,
  logDropped,
  OwnerReportSchema,
} from '../shared/wire.js';
import { callHttp, HttpCallError } from './http-client.js';
import { joinUrl, ownerPath, terminatePath } from './routes.js';

const TerminatedBodySchema = z.object({ terminated: z.literal(true), by: z.string().min(1).max(256) });

export interface DirectBackplaneOptions {
  nodeId: string;
  logger?: Logger;
  /** Upper bound of any HTTP call, even when a caller allows more (default 5000 ms). */
  fetchTimeoutMs?: number;
  /** Extra headers on node-to-node calls, e.g. `authorization` for the internal routes. */
  headers?: Record<string, string>;
  /** Largest reply accepted from a peer (default 64 KiB). */
  maxReplyBytes?: number;
}

/**
 * Asks the owner's advertised URL directly over HTTP (`GET …/owner`, `POST …/terminate`). Only a 404 or a
 * refused connection (nothing listens at the owner's address) means "not running there"; a timeout or a reset
 * is `unknown` (`silent` for a timeout on a reachable owner: connected, then no answer), as is any other
 * failure — a busy or restarting owner is not a dead one. Events stay in-process. Every node serves the two
 * routes by mounting the {@link directRoutes} fastify plugin, which answers with
 * {@link DirectBackplane.handleOwnerQuery} and {@link DirectBackplane.handleTerminate}.
 *
 * @example
 * ```ts
 * const backplane = createDirectBackplane({ nodeId: 'n1' });
 * await app.register(directRoutes, { backplane }); // serve this node's answers to its peers
 * const answer = await backplane.whoRuns('t-1', { timeoutMs: 500, ownerAddress: record.ownerAddress });
 * ```
 */
export class DirectBackplane extends LocalBackplane {
  readonly #fetchTimeoutMs: number;
  readonly #headers: Record<string, string>;
  readonly #maxReplyBytes: number;

  constructor(options: DirectBackplaneOptions) {
    super(options.nodeId, options.logger);
    this.#fetchTimeoutMs = options.fetchTimeoutMs ?? 5_000;
    this.#headers = options.headers ?? {};
    this.#maxReplyBytes = options.maxReplyBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  }

  /** What `GET /v1/internal/transfers/:id/owner` answers: this node's report, or null (→ 404). */
  handleOwnerQuery(transferId: string): OwnerReport | null {
    return this.registry.report(checkTransferId(transferId));
  }

  /** What `POST /v1/internal/transfers/:id/terminate` does: true once stopped here (→ 200), false (→ 404). */
  handleTerminate(transferId: string): Promise<boolean> {
    return this.registry.terminate(checkTransferId(transferId));
  }

  async whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = Math.min(checkTimeout(options.timeoutMs), this.#fetchTimeoutMs);
    if (this.closed) return { status: 'unknown', reason: 'backplane closed' };
    const local = localOwner(this.local, id);
    if (local) return local;
    if (!options.ownerAddress) return { status: 'unknown', reason: 'no owner address to ask' };
    const url = joinUrl(options.ownerAddress, ownerPath(id));
    try {
      const { status, body } = await this.#call(url, 'GET', timeoutMs);
      if (status === 404) return { status: 'nobody' };
      if (status !== 200) return { status: 'unknown', reason: `owner address answered HTTP ${status}` };
      const decoded = decodeJson(body, OwnerReportSchema, this.#maxReplyBytes);
      if (!decoded.ok) {
        logDropped(this.logger, url, decoded.reason, body);
        return { status: 'unknown', reason: `malformed owner report (${decoded.reason})` };
      }
      return { status: 'owner', owner: decoded.value as OwnerReport };
    } catch (err) {
      return unknownOrNobody(err, { status: 'nobody' });
    }
  }

  async terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = Math.min(checkTimeout(options.timeoutMs), this.#fetchTimeoutMs);
    if (this.closed) return { status: 'unknown', reason: 'backplane closed' };
    const local = await localTerminate(this.local, id);
    if (local) return local;
    if (!options.ownerAddress) return { status: 'unknown', reason: 'no owner address to ask' };
    const url = joinUrl(options.ownerAddress, terminatePath(id));
    try {
      const { status, body } = await this.#call(url, 'POST', timeoutMs);
      if (status === 404) return { status: 'not-running' };
      if (status !== 200) return { status: 'unknown', reason: `owner address answered HTTP ${status}` };
      const decoded = decodeJson(body, TerminatedBodySchema, this.#maxReplyBytes);
      if (!decoded.ok) {
        logDropped(this.logger, url, decoded.reason, body);
        return { status: 'unknown', reason: `malformed terminate reply (${decoded.reason})` };
      }
      return { status: 'terminated', by: decoded.value.by };
    } catch (err) {
      // A timeout may be an owner still stopping, or a hung one: not "not running", but silent (the caller may
      // take the transfer over, fenced by the epoch).
      return unknownOrNobody(err, { status: 'not-running' });
    }
  }

  #call(url: string, method: 'GET' | 'POST', timeoutMs: number) {
    return callHttp(url, method, { timeoutMs, headers: this.#headers, maxBytes: this.#maxReplyBytes });
  }
}

/**
 * What a failed call to the owner's address says: a refusal is the definite `nobody` answer; a timeout on a
 * connected peer is `unknown` and `silent` (it listens but does not answer: hung or busy); a timeout while
 * connecting, a reset or any other failure is plain `unknown`.
 */
function unknownOrNobody<N>(err: unknown, nobody: N): N | UnknownAnswer {
  const kind = err instanceof HttpCallError ? err.kind : 'error';
  if (kind === 'unreachable') return nobody;
  const silent = err instanceof HttpCallError && kind === 'timeout' && err.connected;
  return { status: 'unknown', reason: (err as Error).message, ...(silent ? { silent: true } : {}) };
}

/**
 * Creates the direct-address backplane.
 *
 * @example
 * ```ts
 * const backplane = createDirectBackplane({ nodeId: 'n2', fetchTimeoutMs: 2000 });
 * const answer = await backplane.whoRuns('t-1', { timeoutMs: 500, ownerAddress: record.ownerAddress });
 * ```
 */
export function createDirectBackplane(options: DirectBackplaneOptions): DirectBackplane {
  return new DirectBackplane(options);
}
