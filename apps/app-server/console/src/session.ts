import { createClient, type SluiceClient, SluiceClientError } from '@sluice/client';

/** Where the token lives: this tab only, gone when it closes (an operator's token is not left on disk). */
const TOKEN_KEY = 'sluice.console.token';

export function storedToken(): string | undefined {
  return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
}

export function storeToken(token: string | undefined): void {
  if (token === undefined) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** A client of the control API this page was served by (same origin), with the operator's token if any. */
export function clientFor(token: string | undefined): SluiceClient {
  return createClient({ controlUrl: window.location.origin, ...(token ? { token } : {}) });
}

/**
 * Why the token prompt shows: no token yet (or signed out), a token the control API refused at sign-in, or one it
 * stopped accepting while the page was open (a JWT past its `exp`, a token taken off the list).
 */
export const PromptReason = { asked: 'asked', refused: 'refused', expired: 'expired' } as const;
export type PromptReason = (typeof PromptReason)[keyof typeof PromptReason];

/** The outcome of asking the control API who we are: in, a token needed (or refused), or no answer. */
export type Access =
  | { kind: 'granted'; client: SluiceClient; token: string | undefined }
  | { kind: 'token-needed'; reason: PromptReason }
  | { kind: 'unreachable'; message: string };

/** Probes the control API with `token`: `GET /v1/endpoints` answers, or says 401 when auth is on. */
export async function probe(token: string | undefined): Promise<Access> {
  const client = clientFor(token);
  try {
    await client.control.endpoints();
    return { kind: 'granted', client, token };
  } catch (err) {
    if (isUnauthorized(err))
      return {
        kind: 'token-needed',
        reason:
          token === undefined
            ? PromptReason.asked
            : isExpired(err)
              ? PromptReason.expired
              : PromptReason.refused,
      };
    return { kind: 'unreachable', message: messageOf(err) };
  }
}

export function isUnauthorized(err: unknown): boolean {
  return err instanceof SluiceClientError && err.status === 401;
}

/** A 401 the control API gave for a JWT past its `exp` (`reason: "expired"`), not for a token it never accepted. */
function isExpired(err: unknown): boolean {
  return isUnauthorized(err) && (err as SluiceClientError).problem?.reason === 'expired';
}

/** What to tell the operator about a failure: the server's code and message. */
export function messageOf(err: unknown): string {
  if (err instanceof SluiceClientError) return `${err.code}: ${err.message}`;
  return err instanceof Error ? err.message : String(err);
}
