import { library } from '../../tsup.base';

// The commit thread's entry is a file of its own (src/commit-thread.ts starts it beside the bundle); `shims` gives
// the CJS build `import.meta.url` to find it.
export default library({ entry: ['src/index.ts', 'src/commit-worker.ts'], shims: true });
