import { mergeConfig } from 'vitest/config';
import { project } from '../../vitest.shared.ts';

// Pure, side-effect-free unit tests: sharing the module graph within a worker saves re-importing zod per file
// (the isInstance tests make their second module copy explicitly with vi.resetModules).
export default mergeConfig(project(import.meta.url), { test: { isolate: false } });
