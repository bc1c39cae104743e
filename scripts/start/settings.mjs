// Where the quick start runs: the repository, examples/quickstart, the ports, data directory and store, from the
// environment variables both apps honour as well (SLUICE_PORT, SLUICE_API_PORT, SLUICE_DATA_DIR, SLUICE_STORE_URL).
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fail } from './output.mjs';

export const root = fileURLToPath(new URL('../..', import.meta.url));
export const quickstartDir = join(root, 'examples/quickstart');
export const configFile = 'sluice.yaml';
export const endpoint = 'cities';
export const host = '127.0.0.1';

const env = process.env;
export const appPort = portFrom('SLUICE_PORT', 7070);
export const apiPort = portFrom('SLUICE_API_PORT', 8080);
export const dataDir = resolve(quickstartDir, env.SLUICE_DATA_DIR || '.sluice');
export const storeUrl = env.SLUICE_STORE_URL || `sqlite:${join(dataDir, 'store.db')}`;
export const logDir = join(dataDir, 'logs');
export const appUrl = `http://${host}:${appPort}`;
export const apiUrl = `http://${host}:${apiPort}`;

function portFrom(variable, fallback) {
  const value = env[variable];
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 65_535)
    fail(`${variable}=${value} is not a port number (1-65535)`);
  return Number(value);
}
