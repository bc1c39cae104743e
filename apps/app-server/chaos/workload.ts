/**
 * What the chaos run asks the cluster to do: JSONL sources where one key changes several times (`v` counts its
 * versions, so a replayed or dropped change is visible), and one transfer request per destination, each with a
 * destination of its own so its effects can be counted alone.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Rng } from './options.js';

export type Kind = 'file' | 'postgres' | 'jetstream';
export const KINDS: readonly Kind[] = ['file', 'postgres', 'jetstream'];

export interface SourceRecord {
  id: number;
  v: number;
  note: string;
}

export interface Source {
  name: string;
  path: string;
  /** The file's lines exactly as written (a file destination must reproduce them one by one). */
  lines: string[];
  records: SourceRecord[];
  /** id → its last version: what "the last value wins" expects. */
  lastVersion: Map<number, number>;
}

export interface TransferSpec {
  id: string;
  kind: Kind;
  source: Source;
  rate: number;
  body: Record<string, unknown>;
  /** file: the destination path; postgres: the table; jetstream: the subject. */
  target: string;
  /** jetstream only: whether the request names a key field (the sink derives dedupe ids differently). */
  keyed: boolean;
}

/** Line counts of the source variants: short ones finish between faults, long ones are hit mid-way. */
const SOURCE_LINES = [40, 120, 300];

export async function writeSources(dir: string, rng: Rng): Promise<Source[]> {
  await mkdir(dir, { recursive: true });
  const sources: Source[] = [];
  for (const [index, count] of SOURCE_LINES.entries()) {
    const records: SourceRecord[] = [];
    const lastVersion = new Map<number, number>();
    for (let line = 0; line < count; line++) {
      // About a third of the lines change a key seen before: updates to one key are most of the risk.
      const update = lastVersion.size > 0 && rng.chance(0.35);
      const id = update ? rng.int(1, lastVersion.size) : lastVersion.size + 1;
      const v = (lastVersion.get(id) ?? 0) + 1;
      lastVersion.set(id, v);
      records.push({ id, v, note: `s${index}-k${id}-v${v}` });
    }
    const lines = records.map((r) => JSON.stringify(r));
    const name = `source-${index}.jsonl`;
    const path = join(dir, name);
    await writeFile(path, `${lines.join('\n')}\n`);
    sources.push({ name, path, lines, records, lastVersion });
  }
  return sources;
}

export const STREAM = 'CHAOS';
export const SUBJECT_PREFIX = 'chaos';

export function planTransfers(count: number, sources: Source[], outDir: string, rng: Rng): TransferSpec[] {
  const specs: TransferSpec[] = [];
  for (let i = 1; i <= count; i++) {
    const kind = KINDS[(i - 1) % KINDS.length]!;
    const id = `t${String(i).padStart(3, '0')}-${kind}`;
    const source = rng.pick(sources);
    // 0.3 s … 15 s per transfer, so faults find transfers at every stage.
    const rate = rng.pick([20, 40, 80, 150]);
    const keyed = kind === 'jetstream' && i % 2 === 0;
    const target =
      kind === 'file'
        ? join(outDir, `${id}.jsonl`)
        : kind === 'postgres'
          ? `d_${id.replace(/-/g, '_')}`
          : `${SUBJECT_PREFIX}.${id}`;
    const destination =
      kind === 'file'
        ? { type: 'file', path: target, format: 'jsonl' }
        : kind === 'postgres'
          ? { type: 'postgres', connection: 'dest', table: target, key: 'id' }
          : { type: 'jetstream', stream: STREAM, subject: target, ...(keyed ? { key: 'id' } : {}) };
    const body = {
      id,
      mode: 'idempotent',
      source: { type: 'file', path: source.path, format: 'jsonl' },
      destination,
      properties: { chaos: true },
      options: { maxRecordsPerSecond: rate },
    };
    specs.push({ id, kind, source, rate, body, target, keyed });
  }
  return specs;
}
