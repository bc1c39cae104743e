#!/usr/bin/env node
import { type CliFlags, createLogger, loadConfig, runCli } from '@sluice/http';
import { InvalidArgumentError } from 'commander';
import { startApiServer } from './server.js';

function portArg(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) > 65_535) throw new InvalidArgumentError('must be a port number');
  return Number(value);
}

void runCli<ReturnType<typeof loadConfig>, CliFlags & { port?: number; host?: string }>({
  name: 'sluice-api-server',
  description:
    'Serves the query API over the endpoint caches of this host, switching blue/green on AliasRedirected.',
  options: (command) =>
    command
      .option('-p, --port <port>', 'listen port (overrides api.port and SLUICE_API_PORT)', portArg)
      .option('--host <host>', 'listen address (overrides api.host)'),
  load: ({ configPath, env, cwd }) => loadConfig({ configPath, env, cwd }),
  start: async (loaded, flags) => {
    const logger = createLogger({ service: 'sluice-api-server', level: loaded.config.logLevel });
    for (const warning of loaded.warnings)
      logger.warn({ key: warning.path, movedTo: warning.movedTo }, warning.message);
    logger.info({ config: loaded.path, dataDir: loaded.dataDir }, 'starting api-server');
    const server = await startApiServer({
      config: loaded.config,
      dataDir: loaded.dataDir,
      logger,
      host: flags.host,
      port: flags.port,
    });
    return {
      drain: () => {
        logger.info(
          { drainDelayMs: loaded.config.http.drainDelayMs },
          'draining: readiness 503, still serving, then shutting down',
        );
        server.drain();
      },
      close: (signal) => {
        logger.info({ signal }, 'shutting down');
        return server.close();
      },
    };
  },
  graceMs: ({ config }) => config.transfers.shutdownGraceMs,
  drainMs: ({ config }) => config.http.drainDelayMs,
  portHint: 'api.port (SLUICE_API_PORT, --port)',
});
