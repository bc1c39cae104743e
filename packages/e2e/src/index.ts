export { buildApps } from './build.js';
export { repoRoot } from './paths.js';
export { runScript, type ScriptResult, sh } from './shell.js';
export { descendants, runAsUser, type UserProcess } from './user-process.js';
