import { readFile, rename, writeFile } from 'node:fs/promises';
import { type CheckpointPort, StaleEpochError } from '@sluice/core';

/** A durable checkpoint port in a JSON file (write + rename), for tests and child processes. */
export function fileCheckpointPort(path: string): CheckpointPort & { saves: number } {
  const port = {
    saves: 0,
    async load() {
      try {
        return JSON.parse(await readFile(path, 'utf8')) as unknown;
      } catch {
        return null;
      }
    },
    async save(checkpoint: unknown) {
      await writeFile(`${path}.next`, JSON.stringify(checkpoint));
      await rename(`${path}.next`, path);
      port.saves++;
    },
  };
  return port;
}

/** An in-memory checkpoint port. */
export function memoryCheckpointPort(): CheckpointPort & { value: unknown } {
  const port = {
    value: null as unknown,
    load: async () => port.value,
    save: async (checkpoint: unknown) => {
      port.value = structuredClone(checkpoint);
    },
  };
  return port;
}

/**
 * A file checkpoint port fenced like the app-server's: `save` fails with `StaleEpochError` once the
 * owner file names another owner (the transfer was taken over). Tests write the owner file to take over.
 */
export function fencedFileCheckpointPort(
  path: string,
  ownerFile: string,
  owner: string,
  transferId: string,
): CheckpointPort & { saves: number } {
  const inner = fileCheckpointPort(path);
  const port = {
    saves: 0,
    load: () => inner.load(),
    async save(checkpoint: unknown) {
      const current = (await readFile(ownerFile, 'utf8')).trim();
      if (current !== owner) throw new StaleEpochError(transferId, 1, { details: { owner, current } });
      await inner.save(checkpoint);
      port.saves++;
    },
  };
  return port;
}
