import { describe, expect, it } from 'vitest';
import { parseConfigYaml } from '../config-file.js';
import { ConfigError } from '../errors.js';
import { MOVED_KEYS, moveOldKeys } from './moved-keys.js';
import { parseConfig, resolveConfig } from './resolve.js';

function refusal(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected the configuration to be refused');
}

/** A value in range for each old key that differs from its default, so a lost key cannot pass unnoticed. */
const OLD_VALUES: Record<keyof typeof MOVED_KEYS, number> = {
  'limits.maxConcurrentTransfers': 7,
  'limits.queueSize': 33,
  'limits.fireAndForgetConcurrency': 3,
  'limits.leaseMs': 21_000,
  'limits.heartbeatMs': 4_000,
  'limits.ownerWaitMs': 900,
  'limits.sweepIntervalMs': 1_500,
  'limits.shutdownGraceMs': 2_500,
  'limits.bodyBytes': 2048,
  'limits.pageSizeMax': 77,
  'limits.queryLimitMax': 250,
  'limits.queryLimitDefault': 25,
  'limits.inMax': 40,
  'limits.depthMax': 4,
  'limits.retentionDays': 9,
};

const valueAt = (config: object, path: string): unknown =>
  path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], config);

describe('keys of the former limits section', () => {
  it.each(Object.entries(MOVED_KEYS))('%s is accepted and lands at %s with one warning', (from, to) => {
    const key = from.split('.')[1]!;
    const value = OLD_VALUES[from as keyof typeof MOVED_KEYS];
    const { config, warnings } = parseConfig({ limits: { [key]: value } });
    expect(valueAt(config, to)).toBe(value);
    expect(warnings).toEqual([
      {
        code: 'CONFIG_KEY_MOVED',
        path: from,
        movedTo: to,
        message: `${from} is deprecated: it is now ${to} (the old key still works; move it to silence this warning)`,
      },
    ]);
  });

  it('a whole old limits section gives the same configuration as the new sections, one warning per key', () => {
    const limits = Object.fromEntries(Object.entries(OLD_VALUES).map(([path, v]) => [path.split('.')[1], v]));
    const current: Record<string, Record<string, number>> = {};
    for (const [from, to] of Object.entries(MOVED_KEYS)) {
      const [section, key] = to.split('.') as [string, string];
      current[section] = { ...current[section], [key]: OLD_VALUES[from as keyof typeof MOVED_KEYS] };
    }
    const old = parseConfig({ limits });
    expect(old.config).toEqual(resolveConfig(current));
    expect(old.warnings.map((w) => w.path)).toEqual(Object.keys(MOVED_KEYS));
    expect(parseConfig(current).warnings).toEqual([]);
    expect(parseConfig({}).warnings).toEqual([]);
  });

  it('an old key beside other keys of its new section merges into it', () => {
    const { config } = parseConfig({ limits: { leaseMs: 30_000 }, transfers: { heartbeatMs: 1_000 } });
    expect(config.transfers).toMatchObject({ leaseMs: 30_000, heartbeatMs: 1_000 });
  });

  it('an empty or null limits section is accepted without a warning', () => {
    expect(parseConfig({ limits: {} }).warnings).toEqual([]);
    expect(parseConfig({ limits: null }).warnings).toEqual([]);
  });

  it('a key set at its old and its new place is refused, naming both', () => {
    const err = refusal(() => parseConfig({ limits: { leaseMs: 20_000 }, transfers: { leaseMs: 30_000 } }));
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.errors).toEqual([
      {
        path: 'limits.leaseMs',
        message: 'set twice: here and as transfers.leaseMs; keep only transfers.leaseMs',
      },
    ]);
    expect(err.message).toBe(
      'Invalid configuration: limits.leaseMs: set twice: here and as transfers.leaseMs; keep only transfers.leaseMs',
    );
  });

  it('an unknown key in limits is refused at its own path, saying where limits went', () => {
    const err = refusal(() => parseConfig({ limits: { leaseMS: 1000 } }));
    expect(err.errors).toEqual([
      {
        path: 'limits.leaseMS',
        message: 'Unrecognized key: "leaseMS" (limits was split into transfers, http, query, retention)',
      },
    ]);
  });

  it('a limits section that is not a mapping is refused', () => {
    expect(refusal(() => parseConfig({ limits: 5 })).errors).toEqual([
      {
        path: 'limits',
        message: 'expected a mapping (limits was split into transfers, http, query, retention)',
      },
    ]);
  });

  it('a bad value under an old key is reported where it was written', () => {
    expect(refusal(() => parseConfig({ limits: { leaseMs: 10 } })).errors.map((e) => e.path)).toEqual([
      'limits.leaseMs',
    ]);
    expect(refusal(() => parseConfig({ limits: { bodyBytes: 1.5 } })).errors.map((e) => e.path)).toEqual([
      'limits.bodyBytes',
    ]);
  });

  it('old-key problems and other problems are reported together', () => {
    const err = refusal(() =>
      parseConfig({ limits: { inMax: 5, nope: 1 }, query: { maxIn: 6 }, store: 'x' }),
    );
    expect(err.errors.map((e) => e.path)).toEqual(['limits.inMax', 'limits.nope', 'store']);
    expect(err.message).toMatch(/^Invalid configuration: limits\.inMax: set twice.*\(and 2 more\)$/);
  });

  it('never modifies the configuration it moves keys out of', () => {
    const raw = { limits: { leaseMs: 20_000 }, transfers: { heartbeatMs: 1_000 } };
    const copy = structuredClone(raw);
    const moved = moveOldKeys(raw);
    expect(raw).toEqual(copy);
    expect(moved.raw).toEqual({ transfers: { heartbeatMs: 1_000, leaseMs: 20_000 } });
  });

  it('a YAML file with old keys names the file in its warnings', () => {
    const { config, warnings } = parseConfigYaml(
      'limits:\n  leaseMs: 20000\n  retentionDays: 3\n',
      {},
      'old.yaml',
    );
    expect(config.transfers.leaseMs).toBe(20_000);
    expect(config.retention.transferDays).toBe(3);
    expect(warnings.map((w) => w.message)).toEqual([
      'old.yaml: limits.leaseMs is deprecated: it is now transfers.leaseMs (the old key still works; move it to silence this warning)',
      'old.yaml: limits.retentionDays is deprecated: it is now retention.transferDays (the old key still works; move it to silence this warning)',
    ]);
  });
});
