export { buildApps, buildPackages } from './build.js';
export {
  installTarballs,
  type PublishedPackage,
  packPackages,
  publishedPackages,
} from './packed.js';
export { repoRoot } from './paths.js';
export { runScript, type ScriptResult, sh } from './shell.js';
export { descendants, runAsUser, type UserProcess } from './user-process.js';
