import { openCacheManager } from '@sluice/cache';
import { writeConfig } from '../test/helpers.js';
import { createItemsGeneration } from './items-generation.js';

const dir = process.argv[2]!;
await using manager = await openCacheManager(dir);
const cache = await createItemsGeneration(manager, 200_000);
await manager.redirect('items', cache.name);
await cache.close();
console.log(await writeConfig(dir, { dataDir: dir, logLevel: 'warn', api: { port: 19100 } }));
