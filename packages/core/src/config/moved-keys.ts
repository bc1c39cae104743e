// Keys that moved to another section. An old `sluice.yaml` keeps working: each old key is moved to its new
// place before validation and reported once as a warning the apps log at start-up. Setting a key at both its old
// and its new place is refused (which one should win is not ours to guess).
import type { FieldIssue } from '../errors.js';

/** Where each key of the former `limits` section lives now. */
export const MOVED_KEYS = {
  'limits.maxConcurrentTransfers': 'transfers.maxConcurrentTransfers',
  'limits.queueSize': 'transfers.queueSize',
  'limits.fireAndForgetConcurrency': 'transfers.fireAndForgetConcurrency',
  'limits.leaseMs': 'transfers.leaseMs',
  'limits.heartbeatMs': 'transfers.heartbeatMs',
  'limits.ownerWaitMs': 'transfers.ownerWaitMs',
  'limits.sweepIntervalMs': 'transfers.sweepIntervalMs',
  'limits.shutdownGraceMs': 'transfers.shutdownGraceMs',
  'limits.bodyBytes': 'http.bodyBytes',
  'limits.pageSizeMax': 'http.pageSizeMax',
  'limits.queryLimitMax': 'query.maxLimit',
  'limits.queryLimitDefault': 'query.defaultLimit',
  'limits.inMax': 'query.maxIn',
  'limits.depthMax': 'query.maxDepth',
  'limits.retentionDays': 'retention.transferDays',
} as const satisfies Record<string, string>;

/** A key of an old configuration that still works but should be moved. */
export interface ConfigWarning {
  code: 'CONFIG_KEY_MOVED';
  /** The key as written, e.g. `limits.leaseMs`. */
  path: string;
  /** Where it belongs now, e.g. `transfers.leaseMs`. */
  movedTo: string;
  message: string;
}

export interface MovedKeys {
  /** The configuration with every old key at its new place (a copy; the input is not modified). */
  raw: Record<string, unknown>;
  warnings: ConfigWarning[];
  /** Old keys that cannot be moved: set at both places, unknown in an old section, or an old section that is not a mapping. */
  issues: FieldIssue[];
  /** New path → the old path its value came from, so that a bad value is reported where it was written. */
  writtenAt: Map<string, string>;
}

const OLD_SECTIONS = [...new Set(Object.keys(MOVED_KEYS).map((path) => path.split('.')[0]!))];

const isMapping = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * Moves every old key of `raw` to its new place.
 *
 * @example
 * ```ts
 * const { raw: current, warnings } = moveOldKeys({ limits: { leaseMs: 20000 } });
 * // current: { transfers: { leaseMs: 20000 } }; warnings[0].movedTo: 'transfers.leaseMs'
 * ```
 */
export function moveOldKeys(input: Record<string, unknown>): MovedKeys {
  const raw: Record<string, unknown> = { ...input };
  const warnings: ConfigWarning[] = [];
  const issues: FieldIssue[] = [];
  const writtenAt = new Map<string, string>();
  for (const section of OLD_SECTIONS) {
    if (!Object.hasOwn(raw, section)) continue;
    const old = raw[section];
    delete raw[section];
    const targets = Object.entries(MOVED_KEYS)
      .filter(([from]) => from.startsWith(`${section}.`))
      .map(([, to]) => to.split('.')[0]!);
    const hint = `${section} was split into ${[...new Set(targets)].join(', ')}`;
    if (old === null || old === undefined) continue;
    if (!isMapping(old)) {
      issues.push({ path: section, message: `expected a mapping (${hint})` });
      continue;
    }
    for (const [key, value] of Object.entries(old)) {
      const from = `${section}.${key}`;
      const to = (MOVED_KEYS as Record<string, string>)[from];
      if (to === undefined) {
        issues.push({ path: from, message: `Unrecognized key: ${JSON.stringify(key)} (${hint})` });
        continue;
      }
      const [newSection, newKey] = to.split('.') as [string, string];
      const current = raw[newSection];
      // A new section of the wrong type is left for validation to report at its own path.
      if (current !== undefined && current !== null && !isMapping(current)) continue;
      const target: Record<string, unknown> = { ...(isMapping(current) ? current : {}) };
      if (Object.hasOwn(target, newKey)) {
        issues.push({ path: from, message: `set twice: here and as ${to}; keep only ${to}` });
        continue;
      }
      target[newKey] = value;
      raw[newSection] = target;
      writtenAt.set(to, from);
      warnings.push({
        code: 'CONFIG_KEY_MOVED',
        path: from,
        movedTo: to,
        message: `${from} is deprecated: it is now ${to} (the old key still works; move it to silence this warning)`,
      });
    }
  }
  return { raw, warnings, issues, writtenAt };
}
