import { library } from '../../tsup.base';

// shims: import.meta.url in the CJS build too (the console's files are found beside the bundle).
export default library({ entry: ['src/index.ts', 'src/bin.ts'], shims: true });
