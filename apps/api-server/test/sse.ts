import { type ClientRequest, request as httpRequest, type IncomingMessage } from 'node:http';
import { waitFor } from '@sluice/testkit';

/** One received Server-Sent Event (data parsed as JSON). */
export interface SseEvent {
  event: string;
  data: unknown;
  id?: string;
}

/**
 * A test subscriber over plain node:http (nothing shared with the code under test): parses the event stream,
 * keeps every event and the last `id`, and can be killed like a dropped connection.
 */
export class SseConnection {
  readonly events: SseEvent[] = [];
  lastId: string | undefined;
  comments = 0;
  closed = false;
  private buffer = '';
  private constructor(
    private readonly req: ClientRequest,
    readonly res: IncomingMessage,
  ) {
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => this.feed(chunk));
    const done = () => {
      this.closed = true;
    };
    res.on('close', done);
    res.on('error', done);
    req.on('error', done);
  }

  /** Connects; rejects with the status and body unless the answer is a 200 event stream. */
  static open(
    url: string,
    headers: Record<string, string> = {},
    /** `localAddress`: connect from another loopback address (another client, to a server keyed by address). */
    options: { localAddress?: string } = {},
  ): Promise<SseConnection> {
    return new Promise((resolve, reject) => {
      const request = { headers: { accept: 'text/event-stream', ...headers }, ...options };
      const req = httpRequest(url, request, (res) => {
        if (res.statusCode !== 200) {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            body += c;
          });
          res.on('end', () =>
            reject(
              Object.assign(new Error(`HTTP ${res.statusCode}: ${body}`), {
                status: res.statusCode,
                body,
                headers: res.headers,
              }),
            ),
          );
          return;
        }
        resolve(new SseConnection(req, res));
      });
      req.on('error', reject);
      req.end();
    });
  }

  private feed(chunk: string): void {
    this.buffer += chunk;
    for (let end = this.buffer.indexOf('\n\n'); end >= 0; end = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      let event = 'message';
      let data = '';
      let id: string | undefined;
      let isComment = true;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'retry') continue;
        isComment = false;
        if (field === 'event') event = value;
        else if (field === 'data') data += value;
        else if (field === 'id') id = value;
      }
      if (isComment) {
        this.comments += 1;
        continue;
      }
      if (id !== undefined) this.lastId = id;
      this.events.push({
        event,
        data: data === '' ? null : JSON.parse(data),
        ...(id !== undefined ? { id } : {}),
      });
    }
  }

  /** Waits until `count` events matching `pred` were received (counting from `from`). */
  async waitForEvent(
    pred: (e: SseEvent) => boolean,
    options: { from?: number; count?: number; timeoutMs?: number } = {},
  ): Promise<SseEvent> {
    const count = options.count ?? 1;
    return waitFor(
      () => {
        const hits = this.events.slice(options.from ?? 0).filter(pred);
        return hits.length >= count ? hits[count - 1] : undefined;
      },
      { timeoutMs: options.timeoutMs ?? 20_000, intervalMs: 10, what: 'a change-feed event' },
    );
  }

  /** Drops the connection (as a network failure would). */
  kill(): void {
    this.req.destroy();
    this.res.destroy();
  }
}

/** Applies feed events to a map keyed by the JSON of the primary key: what a subscriber's local copy is. */
export function applyFeed(events: SseEvent[], into = new Map<string, unknown>()): Map<string, unknown> {
  for (const { event, data } of events) {
    const d = data as { key: unknown[]; record?: unknown };
    if (event === 'upsert') into.set(JSON.stringify(d.key), d.record);
    else if (event === 'delete') into.delete(JSON.stringify(d.key));
    else if (event === 'reset') into.clear();
  }
  return into;
}

/** Every record of an endpoint through the query API (walking `next`), keyed like {@link applyFeed}. */
export async function queryAll(
  base: string,
  endpoint: string,
  filter: Record<string, unknown> = {},
  primaryKey: readonly string[] = ['id'],
  /** Sent with every page (an `authorization` whose token has a row filter: the records it may see). */
  headers: Record<string, string> = {},
): Promise<{ records: Map<string, unknown>; cache: string | null }> {
  const records = new Map<string, unknown>();
  let after: string | null = null;
  let cache: string | null = null;
  do {
    const body: Record<string, unknown> = {
      $filter: filter,
      $limit: 1000,
      ...(after ? { $after: after } : {}),
    };
    const res = await fetch(`${base}/v1/endpoints/${endpoint}/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    if (res.status !== 200) throw new Error(`query: HTTP ${res.status} ${await res.text()}`);
    cache = res.headers.get('sluice-cache');
    const page = (await res.json()) as { records: Array<Record<string, unknown>>; next: string | null };
    for (const record of page.records)
      records.set(JSON.stringify(primaryKey.map((field) => record[field])), record);
    after = page.next;
  } while (after);
  return { records, cache };
}
