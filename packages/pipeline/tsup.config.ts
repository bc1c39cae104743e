import { library } from '../../tsup.base';

// `shims`: the CJS build gets `import.meta.url`, which locates the replication connection's worker file
// (src/sources/replication/stream.ts).
export default library({ shims: true });
