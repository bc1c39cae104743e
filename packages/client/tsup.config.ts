import { library } from '../../tsup.base';

// Runs in browsers too: no Node built-ins, platform-neutral output. Core is imported for types only.
export default library({ platform: 'neutral', target: 'es2022' });
