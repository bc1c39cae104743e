/**
 * The three destinations, prepared before the run and read after it without any code of the product: physical
 * effects are counted where they land (a trigger row per insert/update in PostgreSQL, the stream's own stored
 * messages, the file's lines), because a keyed upsert or a deduplicating stream would hide a double run.
 */
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { StreamReader, WireNats } from './nats-wire.js';
import { type SourceRecord, STREAM, SUBJECT_PREFIX, type TransferSpec } from './workload.js';

const EFFECTS_DDL = `
CREATE TABLE chaos_effects (
  seq bigserial PRIMARY KEY, tbl text NOT NULL, op text NOT NULL, id int NOT NULL, v int NOT NULL,
  xid bigint NOT NULL DEFAULT txid_current(), at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION chaos_effect() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO chaos_effects (tbl, op, id, v) VALUES (TG_TABLE_NAME, TG_OP, OLD.id, OLD.v);
  ELSE
    INSERT INTO chaos_effects (tbl, op, id, v) VALUES (TG_TABLE_NAME, TG_OP, NEW.id, NEW.v);
  END IF;
  RETURN NULL;
END $$;`;

/** A destination's size at one moment, to tell whether a TERMINATED transfer kept writing. */
export type Sample = string;

export class Destinations implements AsyncDisposable {
  private constructor(
    private readonly db: pg.Client,
    private readonly natsPort: number,
  ) {}

  static async prepare(destUrl: string, natsPort: number, specs: TransferSpec[]): Promise<Destinations> {
    const db = new pg.Client({ connectionString: destUrl });
    // The database is dropped at the end of the run with this client possibly still open: not a crash.
    db.on('error', () => {});
    await db.connect();
    const destinations = new Destinations(db, natsPort);
    try {
      await db.query(EFFECTS_DDL);
      for (const spec of specs.filter((s) => s.kind === 'postgres')) {
        await db.query(
          `CREATE TABLE ${spec.target} (id int PRIMARY KEY, v int NOT NULL, note text NOT NULL)`,
        );
        await db.query(
          `CREATE TRIGGER chaos_effect AFTER INSERT OR UPDATE OR DELETE ON ${spec.target} FOR EACH ROW EXECUTE FUNCTION chaos_effect()`,
        );
      }
      await destinations.#withStream((stream) => stream.create([`${SUBJECT_PREFIX}.>`]));
    } catch (err) {
      await destinations[Symbol.asyncDispose]();
      throw err;
    }
    return destinations;
  }

  async #withStream<T>(use: (stream: StreamReader) => Promise<T>): Promise<T> {
    // A fresh connection per use: nats-server is restarted during the run, and the checker must not need a
    // reconnect logic of its own to stay right.
    await using nats = await WireNats.connect(this.natsPort);
    // Awaited here, or the connection would be disposed before the request is answered.
    return await use(new StreamReader(nats, STREAM));
  }

  /** How much of the destination exists now. */
  async sample(spec: TransferSpec): Promise<Sample> {
    switch (spec.kind) {
      case 'file': {
        const text = await readFile(spec.target, 'utf8').catch(() => null);
        return text === null ? 'absent' : `${text.length} bytes`;
      }
      case 'postgres': {
        const r = await this.db.query<{ n: string; last: string | null }>(
          'SELECT count(*) AS n, max(seq) AS last FROM chaos_effects WHERE tbl = $1',
          [spec.target],
        );
        return `${r.rows[0]!.n} writes (last seq ${r.rows[0]!.last ?? '-'})`;
      }
      case 'jetstream': {
        const counts = await this.#withStream((stream) => stream.subjectCounts(spec.target));
        return `${counts.get(spec.target) ?? 0} messages`;
      }
    }
  }

  /** Everything wrong with a COMPLETED transfer's destination (empty when it holds each record exactly once). */
  async verifyCompleted(spec: TransferSpec): Promise<string[]> {
    switch (spec.kind) {
      case 'file':
        return this.#verifyFile(spec);
      case 'postgres':
        return this.#verifyPostgres(spec);
      case 'jetstream':
        return this.#verifyJetStream(spec);
    }
  }

  async #verifyFile(spec: TransferSpec): Promise<string[]> {
    const text = await readFile(spec.target, 'utf8').catch((err: Error) => err);
    if (text instanceof Error) return [`destination file unreadable: ${text.message}`];
    const lines = text.split('\n').filter((l) => l !== '');
    const expected = spec.source.lines;
    const problems: string[] = [];
    if (lines.length !== expected.length)
      problems.push(`${lines.length} lines, the source has ${expected.length}`);
    const first = lines.findIndex((line, i) => !sameRecord(line, expected[i]));
    if (first >= 0)
      problems.push(`line ${first + 1} is ${lines[first]}, the source's is ${expected[first] ?? '(none)'}`);
    problems.push(...keyProblems(spec.source.records, lines.map(parseRecord), 'exact'));
    return problems;
  }

  async #verifyPostgres(spec: TransferSpec): Promise<string[]> {
    const effects = await this.db.query<SourceRecord & { op: string; xid: string; at: Date }>(
      'SELECT op, id, v, xid, at FROM chaos_effects WHERE tbl = $1 ORDER BY seq',
      [spec.target],
    );
    const problems: string[] = [];
    const deletes = effects.rows.filter((r) => r.op === 'DELETE');
    if (deletes.length > 0) problems.push(`${deletes.length} deletes (the source deletes nothing)`);
    const writes = effects.rows.filter((r) => r.op !== 'DELETE');
    // The sink may fold several changes of one key within a batch into one upsert, so a key may be written fewer
    // times than it changed; what it may never do is write a version again or go back to an older one.
    const keyed = keyProblems(spec.source.records, writes, 'folded');
    problems.push(...keyed);
    if (keyed.length > 0) {
      // Which transactions wrote the first key that went wrong: one transaction replaying, or two writers?
      const id = Number(/id (\d+):/.exec(keyed[0]!)?.[1]);
      const rows = writes.filter((w) => w.id === id);
      const at = (d: Date) => d.toISOString().slice(11, 23);
      const shown = rows.slice(0, 12).map((w) => `v${w.v}@${w.xid} ${at(w.at)}`);
      if (rows.length > 12) shown.push(`… (${rows.length} writes)`);
      problems.push(`writes of id ${id} (version@xid time): ${shown.join(', ')}`);
    }
    const rows = await this.db.query<SourceRecord>(`SELECT id, v, note FROM ${spec.target} ORDER BY id`);
    const wrong = rows.rows.filter((r) => spec.source.lastVersion.get(r.id) !== r.v);
    if (rows.rows.length !== spec.source.lastVersion.size)
      problems.push(`${rows.rows.length} rows, the source has ${spec.source.lastVersion.size} keys`);
    if (wrong.length > 0)
      problems.push(
        `the last value did not win for ${wrong.length} keys, e.g. id ${wrong[0]!.id}: v ${wrong[0]!.v}, expected ${spec.source.lastVersion.get(wrong[0]!.id)}`,
      );
    return problems;
  }

  async #verifyJetStream(spec: TransferSpec): Promise<string[]> {
    const messages = await this.#withStream((stream) => stream.messages(spec.target));
    const problems: string[] = [];
    if (messages.length !== spec.source.records.length)
      problems.push(
        `${messages.length} messages stored, the source has ${spec.source.records.length} records`,
      );
    problems.push(
      ...keyProblems(
        spec.source.records,
        messages.map((m) => m.data as SourceRecord),
        'exact',
      ),
    );
    return problems;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.db.end().catch(() => {});
  }
}

function parseRecord(line: string): SourceRecord {
  try {
    return JSON.parse(line) as SourceRecord;
  } catch {
    return { id: -1, v: -1, note: line.slice(0, 80) };
  }
}

function sameRecord(line: string, expected: string | undefined): boolean {
  if (expected === undefined) return false;
  if (line === expected) return true;
  // Field order and number formatting are not part of the contract, the values are.
  const a = parseRecord(line);
  const b = parseRecord(expected);
  return a.id === b.id && a.v === b.v && a.note === b.note;
}

/**
 * Per key, the versions the destination received in order, against the source's 1..n: `exact` wants each version
 * once and in order (a file, a stream); `folded` allows skipped intermediate versions but wants strictly increasing
 * ones ending on the last (an upsert table).
 */
function keyProblems(source: SourceRecord[], written: SourceRecord[], mode: 'exact' | 'folded'): string[] {
  const expected = new Map<number, number>();
  for (const r of source) expected.set(r.id, Math.max(expected.get(r.id) ?? 0, r.v));
  const seen = new Map<number, number[]>();
  for (const r of written) {
    const list = seen.get(r.id) ?? [];
    list.push(r.v);
    seen.set(r.id, list);
  }
  const bad: string[] = [];
  for (const [id, last] of expected) {
    const versions = seen.get(id) ?? [];
    const inOrder = versions.every((v, i) =>
      mode === 'exact' ? v === i + 1 : i === 0 || v > versions[i - 1]!,
    );
    const complete = mode === 'exact' ? versions.length === last : versions[versions.length - 1] === last;
    const shown =
      versions.length > 16
        ? `${versions.slice(0, 16).join(',')},… (${versions.length} writes)`
        : versions.join(',');
    if (!inOrder || !complete) bad.push(`id ${id}: versions [${shown}], source 1..${last}`);
  }
  const extra = [...seen.keys()].filter((id) => !expected.has(id));
  if (extra.length > 0) bad.push(`${extra.length} keys not in the source, e.g. ${extra[0]}`);
  if (bad.length === 0) return [];
  return [`${bad.length} keys wrong: ${bad.slice(0, 4).join('; ')}${bad.length > 4 ? '; …' : ''}`];
}
