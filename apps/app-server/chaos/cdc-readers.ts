/**
 * The CDC chaos run's readers, through the api-server's public query API only:
 * - whole-endpoint queries and counts at random moments: every single answer must show the invariants (the rows'
 *   count, the balances' sum, no key twice) — a source transaction applied in two cache commits breaks them;
 * - read-your-writes: a read sent with `sluice-min-position` of the writer's last commit must see that commit's rows
 *   (`txn` at least its sequence number), or answer `503 POSITION_NOT_REACHED` — never a stale 200.
 * An unreachable api-server (killed by the fault injector) or another `503` (ENDPOINT_NOT_READY) is counted, not a
 * violation.
 */
import { sleep } from '@sluice/testkit';
import type { AccountsWriter, Write } from './cdc-writer.js';
import type { Rng } from './options.js';

export const ENDPOINT = 'accounts';

export interface AccountRow {
  id: number;
  balance: number;
  note: string | null;
  txn: number;
}

export interface ReadCounts {
  /** Whole-endpoint queries whose invariants were checked (with `sluice-min-position`: `freshQueries`). */
  queries: number;
  freshQueries: number;
  counts: number;
  /** Single-record reads with `sluice-min-position` whose answer was checked against the write. */
  lookups: number;
  positionNotReached: number;
  /** No answer within 10 s (the api-server is down). */
  noAnswer: number;
  /** `503` other than POSITION_NOT_REACHED, by code (e.g. ENDPOINT_NOT_READY). */
  unavailable: Record<string, number>;
  /**
   * Answers whose `sluice-position` was below one an earlier answer showed (time going back for a reader, e.g. at a
   * switch to a generation behind the old one). No promise covers it: counted, and the first ones noted.
   */
  positionWentBack: number;
}

export interface ReadViolation {
  kind: string;
  detail: string;
  evidence: string[];
}

/** `0/16B3748` → a number that orders as the LSN does. */
export function lsnValue(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}

/** The LSN in a `sluice-position` header (`accounts.source="0/16B3748"`), or null. */
export function positionOf(header: string | null): string | null {
  return /"([0-9A-Fa-f]+\/[0-9A-Fa-f]+)"/.exec(header ?? '')?.[1] ?? null;
}

/** What every answer must show, whatever moment it reflects. */
export interface Invariants {
  rows: number;
  sum: number;
}

/** The problems of one whole-endpoint answer (empty: it holds). */
export function wholeProblems(records: AccountRow[], expected: Invariants): string[] {
  const problems: string[] = [];
  const ids = new Set<number>();
  const twice: number[] = [];
  let sum = 0;
  for (const r of records) {
    if (ids.has(r.id)) twice.push(r.id);
    ids.add(r.id);
    sum += r.balance;
  }
  if (records.length !== expected.rows) problems.push(`${records.length} rows, expected ${expected.rows}`);
  if (sum !== expected.sum) problems.push(`balances sum to ${sum}, expected ${expected.sum}`);
  if (twice.length > 0) problems.push(`keys twice: ${twice.slice(0, 10).join(', ')}`);
  return problems;
}

export class Readers {
  readonly counts: ReadCounts = {
    queries: 0,
    freshQueries: 0,
    counts: 0,
    lookups: 0,
    positionNotReached: 0,
    noAnswer: 0,
    unavailable: {},
    positionWentBack: 0,
  };
  /** The first answers whose position went back, with their headers. */
  readonly wentBack: string[] = [];
  #highest: { lsn: bigint; text: string } | null = null;
  /** A 404 for a key a write left in place is right only if a later write removed it: decided at the end. */
  readonly #absent: Array<{ key: number; write: Write; answer: string }> = [];
  #running = false;
  #loops: Promise<void>[] = [];

  constructor(
    private readonly apiUrl: string,
    private readonly writer: AccountsWriter,
    private readonly expected: Invariants,
    private readonly rng: Rng,
    private readonly violate: (v: ReadViolation) => void,
    /** The last fault events, for evidence. */
    private readonly recent: () => string[],
  ) {}

  start(): void {
    this.#running = true;
    this.#loops = [this.#wholeLoop(), this.#lookupLoop()];
  }

  async stop(): Promise<void> {
    this.#running = false;
    await Promise.all(this.#loops);
  }

  /** Deferred 404 checks, once the writer has stopped: the key must have been removed by a later write. */
  settleAbsences(): void {
    for (const { key, write, answer } of this.#absent) {
      const removedBy = this.writer.removedBy.get(key);
      if (removedBy !== undefined && removedBy > write.seq) continue;
      this.violate({
        kind: 'stale read (read-your-writes)',
        detail: `key ${key}, left in place by write ${write.seq} (${write.kind}, ${write.lsn}), was missing from an answer given with sluice-min-position ${write.lsn}${removedBy === undefined ? '' : ` (removed by write ${removedBy}, not later)`}`,
        evidence: [answer, ...this.recent()],
      });
    }
  }

  async #wholeLoop(): Promise<void> {
    while (this.#running) {
      await sleep(this.rng.int(100, 400));
      if (this.rng.chance(0.3)) await this.#count();
      else await this.#query(this.rng.chance(0.5) ? this.writer.last : null);
    }
  }

  async #lookupLoop(): Promise<void> {
    while (this.#running) {
      await sleep(this.rng.int(50, 250));
      const write = this.writer.last;
      if (write) await this.#lookup(write, this.rng.pick(write.keys));
    }
  }

  #headers(write: Write | null): Record<string, string> {
    return write ? { 'sluice-min-position': write.lsn } : {};
  }

  /** Counts a non-answer; true when the reply is a 200 to check. */
  #answered(reply: Awaited<ReturnType<typeof fetchJson>>, what: string): boolean {
    if (!reply.ok) {
      this.counts.noAnswer += 1;
      return false;
    }
    if (reply.status === 503 && reply.body?.code === 'POSITION_NOT_REACHED') {
      this.counts.positionNotReached += 1;
      return false;
    }
    if (reply.status === 503) {
      const code = String(reply.body?.code ?? 'no code');
      this.counts.unavailable[code] = (this.counts.unavailable[code] ?? 0) + 1;
      return false;
    }
    if (reply.status === 200 || reply.status === 404) {
      this.#watchPosition(reply);
      return true;
    }
    this.violate({
      kind: 'unexpected answer',
      detail: `${what} answered ${reply.status}: ${JSON.stringify(reply.body).slice(0, 300)}`,
      evidence: this.recent(),
    });
    return false;
  }

  async #count(): Promise<void> {
    const reply = await fetchJson(`${this.apiUrl}/v1/endpoints/${ENDPOINT}/count`, {}, {});
    if (!this.#answered(reply, 'count') || !reply.ok) return;
    this.counts.counts += 1;
    if (reply.body?.count !== this.expected.rows)
      this.violate({
        kind: 'half-applied transaction (count)',
        detail: `count answered ${reply.body?.count}, expected ${this.expected.rows}`,
        evidence: [describeAnswer(reply), ...this.recent()],
      });
  }

  async #query(write: Write | null): Promise<void> {
    const reply = await fetchJson(
      `${this.apiUrl}/v1/endpoints/${ENDPOINT}/query`,
      { $order_by: { id: 'asc' }, $limit: this.expected.rows * 2 },
      this.#headers(write),
    );
    if (!this.#answered(reply, 'query') || !reply.ok) return;
    this.counts.queries += 1;
    const records = reply.body.records as AccountRow[];
    const problems = wholeProblems(records, this.expected);
    if (problems.length > 0)
      this.violate({
        kind: 'half-applied transaction (query)',
        detail: problems.join('; '),
        evidence: [describeAnswer(reply), ...this.recent()],
      });
    if (!write) return;
    this.counts.freshQueries += 1;
    const byId = new Map(records.map((r) => [r.id, r]));
    this.#checkPosition(reply, write);
    for (const key of write.keys) this.#checkRow(byId.get(key) ?? null, key, write, describeAnswer(reply));
  }

  async #lookup(write: Write, key: number): Promise<void> {
    const reply = await fetchJson(
      `${this.apiUrl}/v1/endpoints/${ENDPOINT}/records/${key}`,
      undefined,
      this.#headers(write),
    );
    if (!this.#answered(reply, `record ${key}`) || !reply.ok) return;
    this.counts.lookups += 1;
    if (reply.status === 200) this.#checkPosition(reply, write);
    this.#checkRow(
      reply.status === 200 ? (reply.body as AccountRow) : null,
      key,
      write,
      describeAnswer(reply),
    );
  }

  #watchPosition(reply: Answer): void {
    const position = positionOf(reply.headers['sluice-position'] ?? null);
    if (position === null) return;
    const lsn = lsnValue(position);
    if (this.#highest && lsn < this.#highest.lsn) {
      this.counts.positionWentBack += 1;
      if (this.wentBack.length < 5)
        this.wentBack.push(
          `${describeAnswer(reply)} after ${this.#highest.text}; ${this.recent().join(' | ')}`,
        );
    } else this.#highest = { lsn, text: describeAnswer(reply) };
  }

  #checkPosition(reply: Answer, write: Write): void {
    const position = positionOf(reply.headers['sluice-position'] ?? null);
    if (position === null || lsnValue(position) < lsnValue(write.lsn))
      this.violate({
        kind: 'stale read (read-your-writes)',
        detail: `answered 200 with sluice-position ${position ?? '(none)'} below sluice-min-position ${write.lsn} (write ${write.seq})`,
        evidence: [describeAnswer(reply), ...this.recent()],
      });
  }

  #checkRow(row: AccountRow | null, key: number, write: Write, answer: string): void {
    if (row === null) {
      this.#absent.push({ key, write, answer });
      return;
    }
    if (row.txn < write.seq)
      this.violate({
        kind: 'stale read (read-your-writes)',
        detail: `key ${key} served with txn ${row.txn} though write ${write.seq} (${write.kind}, ${write.lsn}) set it and its position was asked for`,
        evidence: [`row ${JSON.stringify(row)}`, answer, ...this.recent()],
      });
  }
}

/** A reply of the api-server: its status, JSON body and headers. */
export interface Answer {
  ok: true;
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: read field by field
  body: any;
  headers: Record<string, string>;
}

/** One api-server call: the reply with its headers, or `{ok: false}` when nothing answered within the deadline. */
export async function fetchJson(
  url: string,
  json: unknown,
  headers: Record<string, string>,
): Promise<Answer | { ok: false; error: string }> {
  try {
    const response = await fetch(url, {
      method: json === undefined ? 'GET' : 'POST',
      headers: json === undefined ? headers : { ...headers, 'content-type': 'application/json' },
      body: json === undefined ? undefined : JSON.stringify(json),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    let body: unknown = text;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {}
    return { ok: true, status: response.status, body, headers: Object.fromEntries(response.headers) };
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
}

function describeAnswer(reply: Answer): string {
  return `answer ${reply.status} sluice-cache=${reply.headers['sluice-cache'] ?? '-'} sluice-position=${reply.headers['sluice-position'] ?? '-'} sluice-checkpoint=${reply.headers['sluice-checkpoint'] ?? '-'}`;
}
