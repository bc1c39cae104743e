import { BadRecordError } from '@sluice/core';
import type { RecordLocation } from './ops.js';

/** What happens to a record that cannot be parsed or typed. */
export type BadRecordPolicy = 'skip' | 'fail';

/** One bad record: where it was and why it was refused. */
export interface BadRecordReport extends RecordLocation {
  reason: string;
}

/** Keeps at most this many reports in memory; the count keeps going. */
export const MAX_BAD_RECORD_REPORTS = 1000;

/**
 * Counts bad records and applies the policy: `skip` keeps a bounded list of reports, `fail` throws a
 * `BadRecordError` (code `BAD_RECORD`) carrying the line and byte offset of the first one.
 */
export class BadRecordCollector {
  count = 0;
  readonly reports: BadRecordReport[] = [];

  constructor(
    readonly policy: BadRecordPolicy,
    private readonly onReport: (report: BadRecordReport) => void = () => {},
  ) {}

  add(report: BadRecordReport): void {
    if (this.policy === 'fail') {
      const where = [
        report.line !== undefined ? `line ${report.line}` : null,
        report.offset !== undefined ? `offset ${report.offset}` : null,
      ]
        .filter(Boolean)
        .join(', ');
      throw new BadRecordError(
        `Bad record in ${report.source}${where ? ` at ${where}` : ''}: ${report.reason}`,
        {
          source: report.source,
          ...(report.line !== undefined ? { line: report.line } : {}),
          ...(report.offset !== undefined ? { offset: report.offset } : {}),
        },
      );
    }
    this.count++;
    if (this.reports.length < MAX_BAD_RECORD_REPORTS) this.reports.push(report);
    this.onReport(report);
  }
}
