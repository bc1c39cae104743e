import { fileURLToPath } from 'node:url';

/** The repository root (tests run the examples from there, as their READMEs say). */
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
