import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import YAML from 'yaml';
import {
  type ConfigWarning,
  ENV_OVERRIDES,
  type ParsedConfig,
  parseConfig,
  type SluiceConfig,
} from './config.js';
import { ConfigError } from './errors.js';

/** Largest configuration file read (configuration is trusted, but a runaway file is still a mistake). */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

/** The file both apps read when started without `--config`, if it exists in the working directory. */
export const DEFAULT_CONFIG_FILE = 'sluice.yaml';

/**
 * Parses YAML configuration text and validates it with {@link parseConfigYaml}, returning the configuration only
 * (the warnings about old keys are dropped: a process reading an operator's file uses `parseConfigYaml` or
 * `loadConfigFile` and logs them).
 *
 * @example
 * ```ts
 * const config = parseConfigText('node: { id: h1, port: 7070 }', process.env, 'sluice.yaml');
 * ```
 */
export function parseConfigText(
  text: string,
  env: Record<string, string | undefined> = {},
  source = 'configuration',
): SluiceConfig {
  return parseConfigYaml(text, env, source).config;
}

/**
 * Parses YAML configuration text and validates it with `parseConfig` after the `SLUICE_*` environment
 * overrides. Invalid YAML names the line and column; an invalid value names every failing key. Both throw
 * `CONFIG_INVALID`. Keys that moved (e.g. `limits.leaseMs`) still work and come back as `warnings`, each naming
 * `source`, the old key and its new place.
 *
 * @example
 * ```ts
 * const { config, warnings } = parseConfigYaml('limits: { leaseMs: 20000 }', process.env, 'sluice.yaml');
 * // warnings[0].message: 'sluice.yaml: limits.leaseMs is deprecated: it is now transfers.leaseMs (…)'
 * ```
 */
export function parseConfigYaml(
  text: string,
  env: Record<string, string | undefined> = {},
  source = 'configuration',
): ParsedConfig {
  const document = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  const yamlError = document.errors[0];
  if (yamlError) {
    const where = yamlError.linePos?.[0];
    const at = where ? `line ${where.line}, column ${where.col}` : null;
    // The parser's first line ends with its own " at line L, column C:" (then a code frame): said once, by us.
    const message =
      (yamlError.message.split('\n')[0] ?? '').replace(/\s*at line \d+, column \d+:?\s*$/, '') ||
      'invalid YAML';
    // The issue is where it is (a location, not a key): `path: reason` is in the message, so a CLI prints it once.
    throw new ConfigError(`${source} is not valid YAML${at ? ` at ${at}` : ''}: ${message}`, [
      { path: at ?? '(root)', message },
    ]);
  }
  let raw: unknown;
  try {
    raw = document.toJS({ maxAliasCount: 100 });
  } catch (err) {
    // yaml refuses documents whose aliases expand beyond the limit (a "billion laughs" file).
    throw new ConfigError(`${source} is not usable YAML: ${(err as Error).message}`, [
      { path: '(root)', message: (err as Error).message },
    ]);
  }
  if (raw !== null && raw !== undefined && (typeof raw !== 'object' || Array.isArray(raw)))
    throw new ConfigError(`${source} must be a YAML mapping`, [
      { path: '(root)', message: 'expected a mapping' },
    ]);
  try {
    const { config, warnings } = parseConfig(raw ?? {}, env);
    return { config, warnings: warnings.map((w) => ({ ...w, message: `${source}: ${w.message}` })) };
  } catch (err) {
    if (err instanceof ConfigError) {
      // A value set by an environment variable is blamed on the variable, not on the file.
      const fromEnv = new Map<string, string>();
      for (const [name, path] of Object.entries(ENV_OVERRIDES))
        if (env[name] !== undefined) fromEnv.set(path, name);
      const lines = err.errors
        .map((issue) => {
          const variable = fromEnv.get(issue.path);
          // Redacted: a mistyped SLUICE_STORE_URL or SLUICE_NATS_URL carries its password.
          const origin = variable
            ? ` (from ${variable}=${JSON.stringify(redactUrl(env[variable] ?? ''))})`
            : '';
          return `  ${issue.path}: ${issue.message}${origin}`;
        })
        .join('\n');
      throw new ConfigError(
        `Invalid configuration in ${source}${lines ? `:\n${lines}` : `: ${err.message}`}`,
        err.errors,
        { cause: err },
      );
    }
    throw err;
  }
}

export interface LoadConfigFileOptions {
  /** `--config`; when absent, `./sluice.yaml` is read if it exists, else the embedded defaults apply. */
  configPath?: string | undefined;
  env?: Record<string, string | undefined>;
  /** The working directory: where `sluice.yaml` is looked for and what a relative `dataDir` resolves against. */
  cwd?: string;
}

export interface LoadedConfigFile {
  config: SluiceConfig;
  /** The file read, or `null` when running on the embedded defaults. */
  path: string | null;
  /** `dataDir` as an absolute path (a relative one resolves against the working directory). */
  dataDir: string;
  /** Keys that still work but moved (one each): the process logs them at start-up. */
  warnings: ConfigWarning[];
}

/**
 * Reads a host's configuration the way every Sluice process does: the `--config` file, else `./sluice.yaml`
 * when present, else the embedded defaults; then the environment overrides; then validation. An app-server
 * and api-servers started from one directory with one file therefore agree on everything, `dataDir` included.
 *
 * @example
 * ```ts
 * const { config, dataDir, warnings } = loadConfigFile({ configPath: 'sluice.yaml', env: process.env });
 * for (const warning of warnings) logger.warn({ key: warning.path, movedTo: warning.movedTo }, warning.message);
 * ```
 */
export function loadConfigFile(options: LoadConfigFileOptions = {}): LoadedConfigFile {
  const cwd = options.cwd ?? process.cwd();
  const env = options.env ?? {};
  let path: string | null = null;
  if (options.configPath !== undefined) path = resolve(cwd, options.configPath);
  else if (existsSync(resolve(cwd, DEFAULT_CONFIG_FILE))) path = resolve(cwd, DEFAULT_CONFIG_FILE);
  let parsed: ParsedConfig;
  if (path === null) parsed = parseConfigYaml('{}', env, 'the embedded defaults');
  else {
    let text: string;
    try {
      const buffer = readFileSync(path);
      if (buffer.byteLength > MAX_CONFIG_BYTES)
        throw new ConfigError(`Configuration file ${path} is larger than ${MAX_CONFIG_BYTES} bytes`);
      text = buffer.toString('utf8');
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`Cannot read configuration file ${path}: ${(err as Error).message}`, [], {
        cause: err,
      });
    }
    parsed = parseConfigYaml(text, env, options.configPath ?? DEFAULT_CONFIG_FILE);
  }
  const { config, warnings } = parsed;
  const dataDir = isAbsolute(config.dataDir) ? config.dataDir : resolve(cwd, config.dataDir);
  return { config, path, dataDir, warnings };
}

const SECRET_KEYS = /^(jwtSecret|tokens?|password|pass|secret|nkeySeed)$/i;

/** Query parameters of a URL that carry a secret: libpq's `password` and `sslpassword` (the key's passphrase). */
const SECRET_QUERY_KEYS = /^(ssl)?password$|^pass$|^token$|^secret$/i;
/** Schemes whose userinfo without a password is a role name, printed as is (else it is a token: NATS). */
const USER_NAME_SCHEMES: ReadonlySet<string> = new Set(['postgres', 'postgresql']);

/**
 * A URL safe to print: the password of `user:password@` becomes `***`; userinfo without a password is a
 * token for every scheme but PostgreSQL's (`nats://<token>@host`), so it is masked whole; query parameters
 * carrying a secret (`password`, `sslpassword`: libpq's) are masked. Everything else is kept as written;
 * text that is not `scheme://…` is returned unchanged. The one definition: the store's logs and the apps'
 * `--check` and start-up lines all use it.
 *
 * @example
 * ```ts
 * redactUrl('postgres://u@db/x?password=pw'); // 'postgres://u@db/x?password=***'
 * redactUrl('nats://s3cret@127.0.0.1:4222'); // 'nats://***@127.0.0.1:4222'
 * ```
 */
export function redactUrl(text: string): string {
  const prefix = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  if (prefix === null) return text;
  const scheme = (prefix[1] as string).toLowerCase();
  const rest = text.slice(prefix[0].length);
  const authorityEnd = rest.search(/[/?#\s]/);
  let authority = authorityEnd === -1 ? rest : rest.slice(0, authorityEnd);
  const tail = authorityEnd === -1 ? '' : rest.slice(authorityEnd);
  const at = authority.lastIndexOf('@');
  if (at !== -1) {
    const userinfo = authority.slice(0, at);
    const colon = userinfo.indexOf(':');
    const masked =
      colon !== -1 ? `${userinfo.slice(0, colon)}:***` : USER_NAME_SCHEMES.has(scheme) ? userinfo : '***';
    authority = `${masked}${authority.slice(at)}`;
  }
  // The query: from the first `?` up to a `#` (or the end).
  const query = tail.indexOf('?');
  if (query === -1) return `${prefix[0]}${authority}${tail}`;
  const fragment = tail.indexOf('#', query);
  const end = fragment === -1 ? tail.length : fragment;
  const params = tail
    .slice(query + 1, end)
    .split('&')
    .map((param) => {
      const eq = param.indexOf('=');
      if (eq === -1) return param;
      let key = param.slice(0, eq);
      try {
        key = decodeURIComponent(key);
      } catch {}
      return SECRET_QUERY_KEYS.test(key) ? `${param.slice(0, eq)}=***` : param;
    })
    .join('&');
  return `${prefix[0]}${authority}${tail.slice(0, query + 1)}${params}${tail.slice(end)}`;
}

/**
 * A copy of a configuration safe to print (`--check`, logs): secrets (`jwtSecret`, `tokens`, passwords) become
 * `"***"` and every string is passed through {@link redactUrl} (URL passwords, tokens, `?password=`).
 *
 * @example
 * ```ts
 * console.log(JSON.stringify(redactConfig(config), null, 2));
 * ```
 */
export function redactConfig<T>(value: T): T {
  const walk = (node: unknown, key: string | null): unknown => {
    if (key !== null && SECRET_KEYS.test(key) && node !== undefined && node !== null) {
      return Array.isArray(node) ? node.map(() => '***') : '***';
    }
    if (typeof node === 'string') return redactUrl(node);
    if (Array.isArray(node)) return node.map((item) => walk(item, null));
    if (node !== null && typeof node === 'object')
      return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, walk(v, k)]));
    return node;
  };
  return walk(value, null) as T;
}
