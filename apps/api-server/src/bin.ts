#!/usr/bin/env node
import { asSluiceError, redactConfig, toProblem } from '@sluice/core';
import { Command, InvalidArgumentError } from 'commander';
import { loadConfig } from './config.js';
import { createLogger } from './logger.js';
import { startApiServer } from './server.js';

function portArg(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) > 65_535) throw new InvalidArgumentError('must be a port number');
  return Number(value);
}

const program = new Command()
  .name('sluice-api-server')
  .description(
    'Serves the query API over the endpoint caches of this host, switching blue/green on AliasRedirected.',
  )
  .option('-c, --config <path>', 'configuration file (default: ./sluice.yaml when present)')
  .option('-p, --port <port>', 'listen port (overrides api.port and SLUICE_API_PORT)', portArg)
  .option('--host <host>', 'listen address (overrides api.host)')
  .option('--check', 'validate the configuration, print it (secrets redacted), and exit')
  .showHelpAfterError();

async function main(): Promise<void> {
  program.parse();
  const options = program.opts<{ config?: string; port?: number; host?: string; check?: boolean }>();
  let loaded: ReturnType<typeof loadConfig>;
  try {
    loaded = loadConfig({ configPath: options.config, env: process.env });
  } catch (err) {
    const { body } = toProblem(err);
    process.stderr.write(`sluice-api-server: ${body.code}: ${body.detail}\n`);
    for (const issue of body.errors ?? []) process.stderr.write(`  - ${issue.path}: ${issue.message}\n`);
    process.exit(1);
  }
  if (options.check) {
    process.stdout.write(`${JSON.stringify(redactConfig(loaded.config), null, 2)}\n`);
    return;
  }
  const logger = createLogger(loaded.config.logLevel);
  for (const warning of loaded.warnings)
    logger.warn({ key: warning.path, movedTo: warning.movedTo }, warning.message);
  logger.info({ config: loaded.path, dataDir: loaded.dataDir }, 'starting api-server');
  let server: Awaited<ReturnType<typeof startApiServer>>;
  try {
    server = await startApiServer({
      config: loaded.config,
      dataDir: loaded.dataDir,
      logger,
      host: options.host,
      port: options.port,
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException)?.code === 'EADDRINUSE') {
      const { address, port } = err as { address?: string; port?: number };
      process.stderr.write(
        `sluice-api-server: ${address ?? ''}:${port ?? ''} is already in use; choose another api.port (SLUICE_API_PORT, --port) or stop what listens there\n`,
      );
      process.exitCode = 1;
      return;
    }
    const error = asSluiceError(err);
    logger.fatal({ err, code: error.code }, `api-server failed to start: ${error.message}`);
    logger.flush();
    process.exitCode = 1;
    return;
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      logger.error('shutdown took too long; exiting');
      process.exit(1);
    }, loaded.config.transfers.shutdownGraceMs + 5_000);
    force.unref();
    void server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

void main();
