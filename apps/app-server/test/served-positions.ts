/**
 * What a client of the api-server sees of `items` across a switch: the generation of each answer and the
 * `sluice-position` it carries, read over and over, and where that position went back — what the switch tests
 * (docs/generations.md § The switch hands over at a position) assert never happens.
 */
import { compareLsn } from '@sluice/pipeline';
import { call } from './helpers.js';

/** One answer of the api-server: the generation that gave it and the `sluice-position` LSN it carried. */
export interface Answer {
  cache: string;
  lsn: string;
}

/** The LSN of `items.source` in a `sluice-position` header, or null. */
export function lsnIn(header: string | null): string | null {
  return header === null ? null : (/items\.source="([0-9A-F]+\/[0-9A-F]+)"/i.exec(header)?.[1] ?? null);
}

/**
 * Every step of `sequence` (answers, a feed's commits) where the LSN went back: the element before and the one after
 * — each whole, so a failure shows what carried them.
 */
export function stepsBack<T extends { lsn: string }>(sequence: readonly T[]): Array<[T, T]> {
  const out: Array<[T, T]> = [];
  for (let i = 1; i < sequence.length; i++)
    if (compareLsn(sequence[i]!.lsn, sequence[i - 1]!.lsn) < 0) out.push([sequence[i - 1]!, sequence[i]!]);
  return out;
}

/** A client reading `items` over and over; its answers so far, in order. */
export interface ContinuousReader extends AsyncDisposable {
  readonly answers: Answer[];
  /** Every answer that was not a 200 with a generation and a position: its status and problem `code`, in order. */
  readonly failed: Array<{ status: number; code: string | null }>;
  /** Stops after the request in flight; resolves with every answer. */
  stop(): Promise<Answer[]>;
}

/**
 * Starts a client reading `items` from the api-server at `api` over and over until stopped, noting the generation
 * and position of every answer (one without either is not noted).
 *
 * @example
 * ```ts
 * await using reader = readContinuously(api);
 * await waitFor(() => reader.answers.length >= 5);
 * expect(stepsBack(await reader.stop())).toEqual([]);
 * ```
 */
export function readContinuously(api: string): ContinuousReader {
  const answers: Answer[] = [];
  const failed: Array<{ status: number; code: string | null }> = [];
  let reading = true;
  const loop = (async () => {
    while (reading) {
      const reply = await call(`${api}/v1/endpoints/items/query`, { json: { $limit: 1 } });
      const lsn = lsnIn(reply.headers.get('sluice-position'));
      const cache = reply.headers.get('sluice-cache');
      if (reply.status === 200 && lsn !== null && cache !== null) answers.push({ cache, lsn });
      else
        failed.push({ status: reply.status, code: (reply.body as { code?: string } | null)?.code ?? null });
    }
  })();
  const stop = async () => {
    reading = false;
    await loop;
    return answers;
  };
  return {
    answers,
    failed,
    stop,
    async [Symbol.asyncDispose]() {
      await stop().catch(() => {});
    },
  };
}

/**
 * A `waitFor` condition: the generation of the last answer once it is not `from` (the switch reached readers), else
 * null.
 */
export function lastGenerationOtherThan(answers: readonly Answer[], from: string): () => string | null {
  return () => {
    const last = answers.at(-1)?.cache;
    return last !== undefined && last !== from ? last : null;
  };
}
