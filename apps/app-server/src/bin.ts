#!/usr/bin/env node
import { runCli } from '@sluice/http';
import { loadConfig } from './config.js';
import { isDatabaseConnectionLoss } from './crash-guard.js';

let nodeId: string | undefined;

void runCli({
  name: 'sluice-app-server',
  description: 'A Sluice data-plane node: control API, idempotent transfers, endpoint pipelines.',
  load: ({ configPath, env, cwd }) => loadConfig({ configPath, env, cwd }),
  start: async ({ config }) => {
    nodeId = config.node.id;
    // Loaded after the configuration is valid: a bad file fails fast, without loading the whole node.
    const { startNode } = await import('./node.js');
    return startNode(config);
  },
  graceMs: ({ config }) => config.limits.shutdownGraceMs,
  portHint: 'node.port (SLUICE_PORT)',
  survive: (err) => {
    if (!isDatabaseConnectionLoss(err)) return false;
    const line = {
      level: 40,
      node: nodeId,
      err: (err as Error).message,
      msg: 'a PostgreSQL connection was lost; it will be replaced',
    };
    process.stderr.write(`${JSON.stringify(line)}\n`);
    return true;
  },
});
