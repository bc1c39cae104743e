// The quick start's data directory (SLUICE_DATA_DIR): made ready before anything is built or started, so a
// directory this user cannot use stops the start at once with one line naming it and the reason — not a stack
// from a mkdir minutes later, after the build.
import { accessSync, constants, mkdirSync } from 'node:fs';
import { fail } from './output.mjs';
import { dataDir, logDir } from './settings.mjs';

/** The OS's refusal in a user's words, with its code (which is what a search finds). */
function refusal(err) {
  switch (err?.code) {
    case 'EACCES':
      return 'permission denied (EACCES)';
    case 'EPERM':
      return 'operation not permitted (EPERM)';
    case 'EROFS':
      return 'read-only file system (EROFS)';
    case 'EEXIST':
    case 'ENOTDIR':
      return `a file is in the way of the directory (${err.code})`;
    default:
      return err?.message ?? String(err);
  }
}

/** Creates the data directory and its `logs/`, and checks this user may write there; else fails with exit 1. */
export function prepareDataDir() {
  try {
    mkdirSync(logDir, { recursive: true });
    accessSync(dataDir, constants.R_OK | constants.W_OK | constants.X_OK);
  } catch (err) {
    const named = process.env.SLUICE_DATA_DIR ? 'SLUICE_DATA_DIR' : 'data directory';
    fail(
      `${named}: ${dataDir} cannot be used as the quick start's data directory: ${refusal(err)}; give this user write access to it, or set SLUICE_DATA_DIR to another directory`,
    );
  }
}
