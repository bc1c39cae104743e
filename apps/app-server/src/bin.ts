#!/usr/bin/env node
import { loadConfigFile, redactConfig, SluiceError } from '@sluice/core';
import { Command } from 'commander';
import { loadConfig } from './config.js';
import { isDatabaseConnectionLoss } from './crash-guard.js';

const program = new Command()
  .name('sluice-app-server')
  .description('A Sluice data-plane node: control API, idempotent transfers, endpoint pipelines.')
  .option(
    '-c, --config <file>',
    'YAML configuration file (default: ./sluice.yaml when present, else the embedded defaults)',
  )
  .option('--check', 'validate the configuration, print it (secrets redacted), and exit')
  .showHelpAfterError()
  .action(() => serve());

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
    process.exitCode = await runSlotsList(
      await loadConfig(program.opts<{ config?: string }>().config),
      options,
    );
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
      process.exitCode = await runSlotsDrop(
        await loadConfig(program.opts<{ config?: string }>().config),
        slot,
        options,
      );
    },
  );

async function main(): Promise<void> {
  await program.parseAsync();
}

async function serve(): Promise<void> {
  const options = program.opts<{ config?: string; check?: boolean }>();
  const { config, warnings } = loadConfigFile({ configPath: options.config, env: process.env });
  if (options.check) {
    process.stdout.write(`${JSON.stringify(redactConfig(config), null, 2)}\n`);
    return;
  }
  // Loaded after the configuration is valid: a bad file fails fast, without loading the whole node.
  const { startNode } = await import('./node.js');
  const node = await startNode(config, { configWarnings: warnings });
  process.on('uncaughtException', (err) => {
    if (isDatabaseConnectionLoss(err)) {
      process.stderr.write(
        `${JSON.stringify({ level: 40, node: config.node.id, err: (err as Error).message, msg: 'a PostgreSQL connection was lost; it will be replaced' })}\n`,
      );
      return;
    }
    process.stderr.write(`sluice-app-server: uncaught exception: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  });
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    const hardStop = setTimeout(() => {
      process.stderr.write(`sluice-app-server: shutdown took too long after ${signal}, exiting\n`);
      process.exit(1);
    }, config.transfers.shutdownGraceMs + 10_000);
    hardStop.unref();
    node.close().then(
      () => process.exit(0),
      (err) => {
        process.stderr.write(`sluice-app-server: shutdown failed: ${(err as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

main().catch((err: unknown) => {
  if (SluiceError.isInstance(err)) {
    process.stderr.write(`sluice-app-server: ${err.code}: ${err.message}\n`);
    const issues = (err as { errors?: Array<{ path: string; message: string }> }).errors ?? [];
    for (const issue of issues) process.stderr.write(`  - ${issue.path}: ${issue.message}\n`);
  } else if ((err as NodeJS.ErrnoException)?.code === 'EADDRINUSE') {
    const { address, port } = err as { address?: string; port?: number };
    process.stderr.write(
      `sluice-app-server: ${address ?? ''}:${port ?? ''} is already in use; choose another node.port (SLUICE_PORT) or stop what listens there\n`,
    );
  } else {
    process.stderr.write(`sluice-app-server: ${(err as Error)?.stack ?? String(err)}\n`);
  }
  process.exit(1);
});
