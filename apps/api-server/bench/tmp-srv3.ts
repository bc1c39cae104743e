import http from 'node:http';
import { openCacheManager } from '@sluice/cache';
import { collectDefaultMetrics, Registry } from 'prom-client';

const mode = process.argv[3] ?? '';
if (mode.includes('m')) collectDefaultMetrics({ register: new Registry() });
const manager = await openCacheManager('/tmp/exp/data');
const cache = await manager.openRo('items');
const RE = /^\/v1\/endpoints\/items\/records\/(\d+)$/;
http
  .createServer((req, res) => {
    const m = RE.exec(req.url!);
    if (mode.includes('s')) cache.servingState();
    const bytes = cache.getJson([Number(m![1])])!;
    if (mode.includes('h')) {
      res.setHeader('sluice-cache', 'items-01m92x5zhp3cfpwezaffq8asy8');
      res.setHeader(
        'sluice-checkpoint',
        'epoch=190001, at="2026-12-05T10:49:46.941Z", committed-at="2026-12-05T10:49:46.983Z"',
      );
    }
    res.setHeader('content-type', 'application/json; charset=utf-8');
    res.setHeader('content-length', bytes.length);
    res.end(bytes);
  })
  .listen(Number(process.argv[2]), '127.0.0.1');
console.log('listening');
