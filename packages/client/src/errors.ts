import type { ErrorCode, FieldIssue } from '@sluice/core';

/** Codes the client itself raises (the server's are core's `ErrorCode`s). */
export const ClientErrorCode = {
  /** The request never got an answer (connection refused, reset, DNS…). */
  NETWORK_ERROR: 'NETWORK_ERROR',
  /** `transfers.wait` gave up. */
  TIMEOUT: 'TIMEOUT',
  /** The server answered something that is not what the API promises. */
  BAD_RESPONSE: 'BAD_RESPONSE',
  /**
   * A token option, or what a token function returned, is an empty string: sent, the request would carry no
   * credentials at all (`undefined` is how to say "no token").
   */
  INVALID_TOKEN: 'INVALID_TOKEN',
} as const;
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

/** An RFC 9457 problem-details body as Sluice servers send it. */
export interface ProblemBody {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  errors?: FieldIssue[];
  [extension: string]: unknown;
}

/**
 * Every failure of the client: the server's stable `code` (from its problem-details body) and HTTP `status`, or
 * a client code (`NETWORK_ERROR`, `TIMEOUT`, `BAD_RESPONSE`, `INVALID_TOKEN`) with status 0.
 *
 * @example
 * ```ts
 * try { await client.transfers.submit(request) }
 * catch (err) { if (err instanceof SluiceClientError && err.code === 'IDEMPOTENCY_CONFLICT') … }
 * ```
 */
export class SluiceClientError extends Error {
  readonly code: ErrorCode | ClientErrorCode | (string & {});
  readonly status: number;
  readonly problem: ProblemBody | null;
  /** `retry-after` of the answer, in ms, when it had one. */
  readonly retryAfterMs: number | null;

  constructor(
    code: SluiceClientError['code'],
    message: string,
    options: {
      status?: number;
      problem?: ProblemBody | null;
      cause?: unknown;
      retryAfterMs?: number | null;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SluiceClientError';
    this.code = code;
    this.status = options.status ?? 0;
    this.problem = options.problem ?? null;
    this.retryAfterMs = options.retryAfterMs ?? null;
  }

  /** The failing paths of a validation error (`errors` of the problem body). */
  get errors(): FieldIssue[] {
    return this.problem?.errors ?? [];
  }
}
