import { library } from '../../tsup.base';

// `fastify.ts` is the `./fastify` subpath: the plugin, kept out of the main entry's declarations.
export default library({ entry: ['src/index.ts', 'src/fastify.ts'] });
