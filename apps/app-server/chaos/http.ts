/** The control API as a client sees it: every call has a deadline, because a SIGSTOPped node never answers. */

export type Reply =
  // biome-ignore lint/suspicious/noExplicitAny: replies are read field by field and checked where they matter
  { ok: true; status: number; body: any } | { ok: false; error: string };

export async function request(
  url: string,
  init: { method?: string; json?: unknown; timeoutMs?: number } = {},
): Promise<Reply> {
  try {
    const response = await fetch(url, {
      method: init.method ?? (init.json === undefined ? 'GET' : 'POST'),
      headers: init.json === undefined ? {} : { 'content-type': 'application/json' },
      body: init.json === undefined ? undefined : JSON.stringify(init.json),
      signal: AbortSignal.timeout(init.timeoutMs ?? 3_000),
    });
    const text = await response.text();
    let body: unknown = text;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {}
    return { ok: true, status: response.status, body };
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code;
    return { ok: false, error: cause ?? (err as Error).name ?? String(err) };
  }
}

/** A short description of a transfer record or problem body for the event log. */
// biome-ignore lint/suspicious/noExplicitAny: see above
export function describe(body: any): string {
  if (body === null || typeof body !== 'object') return String(body).slice(0, 120);
  if (body.code) return `${body.code}: ${String(body.detail ?? body.title ?? '').slice(0, 160)}`;
  const parts = [body.state, body.owner ? `owner=${body.owner.nodeId}` : 'owner=-', `epoch=${body.epoch}`];
  if (body.resumed !== undefined) parts.push(`resumed=${body.resumed}`);
  if (body.error) parts.push(`error=${JSON.stringify(body.error).slice(0, 200)}`);
  return parts.join(' ');
}
