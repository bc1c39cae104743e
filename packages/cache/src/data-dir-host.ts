import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The file in a data directory naming the host whose app-server writes its caches: the `node.id` that app-server
 * stamps on its `AliasRedirected` events. Caches and alias versions are per data directory, so the api-servers
 * reading one follow that host's alias events — whatever `node.id` their own configuration resolves to.
 */
export const DATA_DIR_HOST_FILE = 'host-id';

/**
 * Records `hostId` as the writer of `dataDir`'s caches (the app-server, once it holds the directory). Written to a
 * temporary file then renamed, so a reader never sees half an id.
 */
export function writeDataDirHost(dataDir: string, hostId: string): void {
  const file = join(dataDir, DATA_DIR_HOST_FILE);
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${hostId}\n`);
  renameSync(temporary, file);
}

/**
 * The host recorded in `dataDir` by its app-server, or null when none is (no app-server has started there yet, or
 * the file cannot be read).
 */
export function readDataDirHost(dataDir: string): string | null {
  let text: string;
  try {
    text = readFileSync(join(dataDir, DATA_DIR_HOST_FILE), 'utf8');
  } catch {
    return null;
  }
  const id = text.trim();
  return id === '' ? null : id;
}
