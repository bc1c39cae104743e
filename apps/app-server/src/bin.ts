#!/usr/bin/env node
import { runCli } from '@sluice/http';
import { loadConfig } from './config.js';
import { isDatabaseConnectionLoss } from './crash-guard.js';
import { checkFileRoots } from './file-roots.js';

let nodeId: string | undefined;

void runCli({
  name: 'sluice-app-server',
  description: 'A Sluice data-plane node: control API, idempotent transfers, endpoint pipelines.',
  load: ({ configPath, env, cwd }) =>
    loadConfig({ configPath, env, cwd, validate: (config) => checkFileRoots(config.files.roots, cwd) }),
  commands: (program, configured) => {
    const slots = program
      .command('slots')
      .description('list or drop the logical replication slots of the configured PostgreSQL connections');
    slots
      .command('list')
      .description(
        'list the slots, each with what it is to this node (in-use, orphaned, transfer, other-node, foreign)',
      )
      .option('--connection <name>', 'only this configured connection')
      .option('--json', 'print JSON instead of a table')
      .action(async (options: { connection?: string; json?: boolean }) => {
        const { runSlotsList } = await import('./slots-command.js');
        process.exitCode = await runSlotsList((await configured()).config, options);
      });
    slots
      .command('drop')
      .description(
        'drop a slot Sluice created (and its publication): by name, of an endpoint, or every orphaned one',
      )
      .argument('[slot]', 'the slot name')
      .option('--endpoint <name>', 'the slot of this endpoint (configured or removed)')
      .option('--orphaned', 'every slot this node created for an endpoint no longer in its configuration')
      .option('--connection <name>', 'only look on this configured connection')
      .option('--json', 'print JSON')
      .action(
        async (
          slot: string | undefined,
          options: { endpoint?: string; orphaned?: boolean; connection?: string; json?: boolean },
        ) => {
          const { runSlotsDrop } = await import('./slots-command.js');
          process.exitCode = await runSlotsDrop((await configured()).config, slot, options);
        },
      );
  },
  start: async ({ config, warnings }, _flags, stopping) => {
    nodeId = config.node.id;
    // Loaded after the configuration is valid: a bad file fails fast, without loading the whole node.
    const { startNode } = await import('./node.js');
    return startNode(config, { configWarnings: warnings, stopping });
  },
  graceMs: ({ config }) => config.transfers.shutdownGraceMs,
  drainMs: ({ config }) => config.http.drainDelayMs,
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
