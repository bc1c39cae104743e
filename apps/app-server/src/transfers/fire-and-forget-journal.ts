import { mkdir, open, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type TransferRequest, TransferRequestSchema } from '@sluice/core';
import { z } from 'zod';

/** The journal's directory under the node's data directory. */
export const FIRE_AND_FORGET_JOURNAL_DIR = 'fire-and-forget';

/** At most this many entries are read per pass: a backlog is worked off over several passes, never at once. */
export const JOURNAL_PASS_LIMIT = 500;

/** A writer of a fire-and-forget run (fire-and-forget.ts): the only names the journal keeps files for. */
const WRITER = /^fire-and-forget\.[0-9a-f-]{36}$/;

const JournalEntrySchema = z.object({
  writer: z.string().regex(WRITER),
  nodeId: z.string(),
  instanceId: z.string(),
  startedAt: z.string(),
  request: TransferRequestSchema,
});

/** One fire-and-forget run as the journal keeps it: whose leftovers (`writer`) and where (`request`). */
export interface JournalEntry {
  writer: string;
  nodeId: string;
  /** The app-server process that ran it (`SluiceNode.instanceId`). */
  instanceId: string;
  startedAt: string;
  /** The request with its paths confined, as the run used it. */
  request: TransferRequest;
}

/**
 * One file a pass read: the run its name names, and what it holds (null when it holds no entry: a write cut short
 * by a crash, or one still being written).
 */
export interface JournalRead {
  writer: string;
  entry: JournalEntry | null;
}

/** The entry `text` holds for `writer`, or null. */
function parseEntry(text: string, writer: string): JournalEntry | null {
  try {
    const parsed = JournalEntrySchema.safeParse(JSON.parse(text));
    return parsed.success && parsed.data.writer === writer ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The writer a journal file's name names, or null. */
function writerOfFile(file: string): string | null {
  if (!file.endsWith('.json')) return null;
  const writer = file.slice(0, -'.json'.length);
  return WRITER.test(writer) ? writer : null;
}

/**
 * The fire-and-forget runs of one data directory that have not cleaned up after themselves yet, one small file per
 * run. Fire-and-forget runs are in no store, so without it nothing knows where a run that died with its process
 * (SIGKILL, a crash) staged its temp file or committed its sink checkpoint; with it, the next app-server on the
 * data directory does. The data directory has one app-server at a time (data-dir-lock.ts), so an entry no run of
 * the current process owns belongs to a process that is gone — never to a live run on this or another node.
 *
 * @example
 * ```ts
 * const journal = new FireAndForgetJournal('/var/lib/sluice/fire-and-forget');
 * await journal.record({ writer, nodeId, instanceId, startedAt: new Date().toISOString(), request });
 * await journal.forget(writer); // once its leftovers are removed
 * ```
 */
export class FireAndForgetJournal {
  readonly directory: string;

  constructor(directory: string) {
    this.directory = directory;
  }

  #fileOf(writer: string): string {
    if (!WRITER.test(writer)) throw new TypeError(`not a fire-and-forget writer: ${writer}`);
    return join(this.directory, `${writer}.json`);
  }

  /**
   * Records a run before it writes anything, durably: fsynced with its directory entry, so a run whose temp file
   * survived a crash of the host is found too.
   */
  async record(entry: JournalEntry): Promise<void> {
    const file = this.#fileOf(entry.writer);
    await mkdir(this.directory, { recursive: true });
    const handle = await open(file, 'w');
    try {
      await handle.writeFile(JSON.stringify(entry));
      await handle.sync();
    } finally {
      await handle.close();
    }
    const directory = await open(this.directory, 'r');
    try {
      await directory.sync();
    } finally {
      await directory.close();
    }
  }

  /** Drops a run's entry once nothing of it is left to remove. */
  async forget(writer: string): Promise<void> {
    await rm(this.#fileOf(writer), { force: true });
  }

  /** Up to {@link JOURNAL_PASS_LIMIT} of the journal's runs, each with what its file holds (other files are ignored). */
  async read(): Promise<JournalRead[]> {
    const names = await readdir(this.directory).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    const reads: JournalRead[] = [];
    const writers = names.map(writerOfFile).filter((writer) => writer !== null);
    for (const writer of writers.slice(0, JOURNAL_PASS_LIMIT)) {
      const text = await readFile(this.#fileOf(writer), 'utf8').catch(() => null);
      // Gone meanwhile: its run ended and forgot it.
      if (text === null) continue;
      reads.push({ writer, entry: parseEntry(text, writer) });
    }
    return reads;
  }
}
