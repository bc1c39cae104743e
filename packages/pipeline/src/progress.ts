import type { PipelinePhase, PipelineProgress } from '@sluice/core';

const RATE_WINDOW_MS = 5_000;

/** Tracks what a pipeline read and wrote, and its rate over the last few seconds. */
export class ProgressTracker {
  phase: PipelinePhase = 'starting';
  recordsRead = 0;
  recordsWritten = 0;
  badRecords = 0;
  epoch = 0;
  lag: number | null = null;
  readonly startedAt = new Date().toISOString();
  private samples: Array<{ t: number; written: number }> = [];

  sample(now = Date.now()): void {
    // A count that went down was reset (a rebuild starts a new generation at 0): samples of the old count
    // would make the rate negative.
    const last = this.samples[this.samples.length - 1];
    if (last && this.recordsWritten < last.written) this.samples = [];
    this.samples.push({ t: now, written: this.recordsWritten });
    while (this.samples.length > 2 && this.samples[0]!.t < now - RATE_WINDOW_MS) this.samples.shift();
  }

  rate(now = Date.now()): number {
    const first = this.samples[0];
    if (!first || now - first.t <= 0 || this.recordsWritten < first.written) return 0;
    return Math.round(((this.recordsWritten - first.written) * 1000) / (now - first.t));
  }

  snapshot(): PipelineProgress {
    return {
      phase: this.phase,
      recordsRead: this.recordsRead,
      recordsWritten: this.recordsWritten,
      badRecords: this.badRecords,
      rate: this.rate(),
      lag: this.lag,
      epoch: this.epoch,
      startedAt: this.startedAt,
    };
  }
}
