import { redactConfig, SluiceError } from '@sluice/core';
import { Command } from 'commander';

/**
 * How a Sluice program exits: `OK` after a clean stop (or `--check` of a valid configuration); `FAILED` for an
 * invalid configuration, a failed start (e.g. the port in use), a failed or overlong shutdown, an uncaught
 * exception, and bad command-line arguments (commander's usage errors).
 *
 * @example
 * ```ts
 * if ((await child.exited).code === ExitCode.FAILED) console.error(child.output());
 * ```
 */
export const ExitCode = { OK: 0, FAILED: 1 } as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/**
 * Time a program gets after its own shutdown grace before it is forced out: closing the store, the caches and
 * the backplane comes after the grace a running transfer or request is given.
 *
 * @example
 * ```ts
 * const forcedAfterMs = config.transfers.shutdownGraceMs + FORCED_EXIT_MARGIN_MS; // 20 000 by default
 * ```
 */
export const FORCED_EXIT_MARGIN_MS = 10_000;

/** A started program: what a signal stops. */
export interface Running {
  /**
   * Begins the drain SIGTERM starts with ({@link ShutdownDrain}): readiness 503, requests still served, each answer
   * with `Connection: close`; `close` follows after the program's `drainMs`.
   */
  drain?(): void;
  /** Graceful stop; `signal` is the one that asked for it. */
  close(signal?: NodeJS.Signals): Promise<void>;
}

/** The options every Sluice program takes (the program may add its own). */
export interface CliFlags {
  config?: string;
  check?: boolean;
}

/** Options of {@link runCli}. */
export interface RunCliOptions<Loaded extends { config: unknown }, Flags extends CliFlags> {
  /** The command's name, prefixing every line it prints itself (e.g. `sluice-api-server`). */
  name: string;
  description: string;
  /** Adds the program's own options to the command (`--config` and `--check` are there already). */
  options?: (command: Command) => void;
  /**
   * Adds subcommands (e.g. `slots list`). Their actions get the configuration through `configured` (loaded by
   * `load` from the parent's `--config`), set `process.exitCode`, and may throw: a throw is printed like a failed
   * start and exits 1.
   */
  commands?: (command: Command, configured: () => Promise<Loaded>) => void;
  /** Loads and validates the configuration; throws `CONFIG_INVALID` naming the field. */
  load: (input: {
    configPath: string | undefined;
    env: NodeJS.ProcessEnv;
    cwd: string;
  }) => Loaded | Promise<Loaded>;
  /**
   * Starts the program once its configuration is valid. `stopping` aborts when a signal arrives before the start finished: a start that waits (for
   * a server to come up) gives up then, and its rejection ends the process with 0 — it was asked to stop.
   */
  start: (loaded: Loaded, flags: Flags, stopping: AbortSignal) => Promise<Running>;
  /** The program's own shutdown grace (ms); it is forced out {@link FORCED_EXIT_MARGIN_MS} after that. */
  graceMs: number | ((loaded: Loaded) => number);
  /**
   * How long SIGTERM drains before the graceful close (`http.drainDelayMs`; default 0): `Running.drain` runs at
   * once, `close` after this long, so a load balancer polling readiness takes the program out before it stops
   * answering. SIGINT and SIGHUP (an operator at a terminal) close at once.
   */
  drainMs?: number | ((loaded: Loaded) => number);
  /** What to change when the listen port is taken, e.g. `api.port (SLUICE_API_PORT, --port)`. */
  portHint?: string;
  /** Uncaught exceptions the program survives (it has handled them, e.g. logged a lost pooled connection). */
  survive?: (err: unknown) => boolean;
  /** Command-line arguments as `process.argv` has them (default: `process.argv`). */
  argv?: string[];
}

function issuesOf(err: SluiceError): Array<{ path: string; message: string }> {
  const errors = (err as { errors?: unknown }).errors;
  if (!Array.isArray(errors)) return [];
  return errors.filter(
    (issue): issue is { path: string; message: string } =>
      typeof issue?.path === 'string' && typeof issue?.message === 'string',
  );
}

/**
 * The text a program prints for a failure at start, one way for every program: `<name>: <CODE>: <message>` for a
 * Sluice error, then `  - <path>: <reason>` for each failing field the message does not already name; a one-line
 * hint for a port in use; the stack for anything else (a bug).
 *
 * @example
 * ```ts
 * formatCliError('sluice-api-server', new ConfigError('limits.heartbeatMs must be shorter', [
 *   { path: 'limits.heartbeatMs', message: 'must be less than limits.leaseMs (15000)' },
 * ]));
 * // 'sluice-api-server: CONFIG_INVALID: limits.heartbeatMs must be shorter\n  - limits.heartbeatMs: must be …\n'
 * ```
 */
export function formatCliError(name: string, err: unknown, portHint = 'another port'): string {
  if (SluiceError.isInstance(err)) {
    let text = `${name}: ${err.code}: ${err.message}\n`;
    for (const issue of issuesOf(err)) {
      // Core's configuration errors already list `path: reason` in their message.
      if (!err.message.includes(`${issue.path}: ${issue.message}`))
        text += `  - ${issue.path}: ${issue.message}\n`;
    }
    return text;
  }
  if ((err as NodeJS.ErrnoException)?.code === 'EADDRINUSE') {
    const { address, port } = err as { address?: string; port?: number };
    return `${name}: ${address ?? ''}:${port ?? ''} is already in use; choose another ${portHint} or stop what listens there\n`;
  }
  return `${name}: ${(err as Error)?.stack ?? String(err)}\n`;
}

/**
 * Runs a Sluice program the one way both apps do:
 * 1. parses the command line (commander): `-c, --config <file>`, `--check`, and the program's own `options`;
 * 2. `load`s the configuration; `--check` prints it (secrets redacted) and exits 0, after its warnings (keys that
 *    moved, `<name>: warning: …` on stderr);
 * 3. or runs a subcommand the program added (`commands`), with the configuration `load` gives;
 * 4. `start`s the program; on SIGINT, SIGTERM or SIGHUP closes it once (a repeated signal is ignored) and exits 0, or 1
 *    when closing fails or takes longer than `drainMs` + `graceMs` + {@link FORCED_EXIT_MARGIN_MS} (one forced-exit
 *    timer); SIGTERM first drains for `drainMs` (`Running.drain`: readiness 503, requests still served);
 * 5. a failure to load or start is printed to stderr by {@link formatCliError} and exits 1 (see {@link ExitCode}).
 *
 * @example
 * ```ts
 * await runCli({
 *   name: 'sluice-api-server',
 *   description: 'Serves the query API over the endpoint caches of this host.',
 *   load: ({ configPath, env, cwd }) => loadConfig({ configPath, env, cwd }),
 *   start: ({ config, dataDir }) => startApiServer({ config, dataDir }),
 *   graceMs: ({ config }) => config.transfers.shutdownGraceMs,
 *   drainMs: ({ config }) => config.http.drainDelayMs,
 *   portHint: 'api.port (SLUICE_API_PORT, --port)',
 * });
 * ```
 */
export async function runCli<Loaded extends { config: unknown }, Flags extends CliFlags = CliFlags>(
  options: RunCliOptions<Loaded, Flags>,
): Promise<void> {
  const { name } = options;
  const program = new Command()
    .name(name)
    .description(options.description)
    .option(
      '-c, --config <file>',
      'YAML configuration file (default: ./sluice.yaml when present, else the embedded defaults)',
    )
    .option('--check', 'validate the configuration, print it (secrets redacted), and exit');
  options.options?.(program);
  program.showHelpAfterError();
  const fail = (err: unknown): never => {
    process.stderr.write(formatCliError(name, err, options.portHint));
    process.exit(ExitCode.FAILED);
  };
  const configured = async () => {
    const { config: configPath } = program.opts<CliFlags>();
    return options.load({ configPath, env: process.env, cwd: process.cwd() });
  };
  options.commands?.(program, configured);
  // Extra words reach the action so they can be named: commander's own message for them is "too many
  // arguments. Expected 0 arguments but got 1", which says nothing about a mistyped command.
  program.allowExcessArguments(true);
  program.action(async () => {
    const [extra] = program.args;
    if (extra !== undefined) {
      const known = program.commands.map((c) => c.name());
      program.error(
        known.length > 0
          ? `error: unknown command '${extra}' (commands: ${known.join(', ')})`
          : `error: unexpected argument '${extra}' (${name} takes options only)`,
      );
    }
    const flags = program.opts<Flags>();
    const loaded = await configured().catch(fail);
    if (flags.check) {
      // The start logs these; a check that stayed silent would pass a file the start then warns about.
      for (const message of warningMessages(loaded)) process.stderr.write(`${name}: warning: ${message}\n`);
      process.stdout.write(`${JSON.stringify(redactConfig(loaded.config), null, 2)}\n`);
      return;
    }
    await serve(options, loaded, flags, fail);
  });
  try {
    await program.parseAsync(options.argv ?? process.argv);
  } catch (err) {
    fail(err);
  }
}

/** The messages of the configuration's warnings (core's `ConfigWarning`s: keys that moved), if `load` gave any. */
function warningMessages(loaded: { config: unknown; warnings?: unknown }): string[] {
  if (!Array.isArray(loaded.warnings)) return [];
  return loaded.warnings
    .map((warning: unknown) => (warning as { message?: unknown })?.message)
    .filter((message): message is string => typeof message === 'string');
}

/** Starts the program and stops it on SIGINT/SIGTERM/SIGHUP (see {@link runCli}). */
async function serve<Loaded extends { config: unknown }, Flags extends CliFlags>(
  options: RunCliOptions<Loaded, Flags>,
  loaded: Loaded,
  flags: Flags,
  fail: (err: unknown) => never,
): Promise<void> {
  const { name } = options;
  const graceMs = typeof options.graceMs === 'function' ? options.graceMs(loaded) : options.graceMs;
  const drainMs = typeof options.drainMs === 'function' ? options.drainMs(loaded) : (options.drainMs ?? 0);
  let running: Running | undefined;
  let stopSignal: NodeJS.Signals | undefined;
  const starting = new AbortController();
  // SIGTERM is how an orchestrator stops a backend behind a load balancer: keep serving, not ready, until the
  // balancer's health check has seen that. An operator's Ctrl-C (SIGINT) or a lost terminal (SIGHUP) has no
  // balancer to wait for.
  const drained = async (target: Running, signal: NodeJS.Signals): Promise<void> => {
    if (signal !== 'SIGTERM' || drainMs <= 0 || target.drain === undefined) return;
    target.drain();
    await new Promise((resolve) => setTimeout(resolve, drainMs));
  };
  const close = (target: Running, signal: NodeJS.Signals) =>
    drained(target, signal)
      .then(() => target.close(signal))
      .then(
        () => process.exit(ExitCode.OK),
        (err: unknown) => {
          process.stderr.write(`${name}: shutdown failed: ${(err as Error)?.message ?? String(err)}\n`);
          process.exit(ExitCode.FAILED);
        },
      );
  const stop = (signal: NodeJS.Signals) => {
    if (stopSignal !== undefined) return;
    stopSignal = signal;
    const limitMs = (signal === 'SIGTERM' ? drainMs : 0) + graceMs + FORCED_EXIT_MARGIN_MS;
    // Not unref'd: a close that hangs with nothing else pending must still end as a forced exit (1), not as 0.
    setTimeout(() => {
      process.stderr.write(`${name}: shutdown took longer than ${limitMs} ms after ${signal}, exiting\n`);
      process.exit(ExitCode.FAILED);
    }, limitMs);
    if (running !== undefined) void close(running, signal);
    else starting.abort(new Error(`${signal} during start`));
  };
  // Listening before the start: a program says it is ready from inside `start`, and a signal sent the moment it
  // does must stop it gracefully (a signal during the start stops it as soon as it has started).
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // The terminal or ssh session the program was started from went away: Node's default would exit at once
  // (129) without handing anything back. Stopping gracefully is what the operator lost no work to.
  process.on('SIGHUP', () => stop('SIGHUP'));
  process.on('uncaughtException', (err) => {
    if (options.survive?.(err)) return;
    process.stderr.write(`${name}: uncaught exception: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(ExitCode.FAILED);
  });
  try {
    running = await options.start(loaded, flags, starting.signal);
  } catch (err) {
    // Stopped while starting (a start that waits gave up on the signal): nothing runs, nothing to hand back.
    if (stopSignal !== undefined) {
      process.stderr.write(`${name}: stopped by ${stopSignal} before it had started\n`);
      process.exit(ExitCode.OK);
    }
    return fail(err);
  }
  if (stopSignal !== undefined) void close(running, stopSignal);
}
