import { project } from '../../vitest.shared.ts';

// One example at a time: each runs several servers (and `pnpm start` a turbo build) on a 2-core machine.
export default project(import.meta.url, { fileParallelism: false });
