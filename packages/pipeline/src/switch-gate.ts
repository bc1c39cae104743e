import type { SwitchConfig } from '@sluice/core';

/** What the gates look at when a green generation finished its snapshot. */
export interface SwitchFacts {
  /** Records committed in the green generation. */
  records: number;
  /** Records of the generation serving now; null when the endpoint serves nothing yet. */
  servingRecords: number | null;
  /** Bad records skipped while building the green generation. */
  badRecords: number;
}

/**
 * Why a green generation must be held instead of switched to, or null when it may switch. `manual` mode holds
 * every green; `minRecordRatio` holds one with fewer records than that fraction of the serving generation's;
 * `maxBadRecords` holds one that skipped more bad records. An endpoint that serves nothing yet always switches
 * (there is nothing to protect).
 *
 * @example
 * ```ts
 * switchHoldReason({ mode: 'auto', minRecordRatio: 0.9 }, { records: 80, servingRecords: 100, badRecords: 0 });
 * // → '80 records, fewer than 0.9 × 100 (the serving generation)'
 * ```
 */
export function switchHoldReason(config: SwitchConfig | undefined, facts: SwitchFacts): string | null {
  if (facts.servingRecords === null) return null;
  const reasons: string[] = [];
  if (config?.mode === 'manual') reasons.push('manual switch mode: waiting for promote');
  const ratio = config?.minRecordRatio;
  if (ratio !== undefined && facts.records < ratio * facts.servingRecords)
    reasons.push(
      `${facts.records} records, fewer than ${ratio} × ${facts.servingRecords} (the serving generation)`,
    );
  const maxBad = config?.maxBadRecords;
  if (maxBad !== undefined && facts.badRecords > maxBad)
    reasons.push(`${facts.badRecords} bad records, more than the ${maxBad} allowed`);
  return reasons.length === 0 ? null : reasons.join('; ');
}
