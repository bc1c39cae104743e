import { library } from '../../tsup.base';

export default library({ entry: ['src/index.ts', 'src/bin.ts'] });
