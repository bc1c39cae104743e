import { readFile, rename, writeFile } from 'node:fs/promises';
import type { CheckpointPort } from '@sluice/core';

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
