import { describe, expect, it } from 'vitest';
import { ProgressTracker } from './progress.js';

describe('ProgressTracker', () => {
  it('reports the write rate over its window', () => {
    const progress = new ProgressTracker();
    progress.sample(0);
    progress.recordsWritten = 500;
    progress.sample(1_000);
    expect(progress.rate(1_000)).toBe(500);
  });

  it('never reports a negative rate after the written count is reset (a rebuild starting at 0)', () => {
    const progress = new ProgressTracker();
    progress.recordsWritten = 10_000;
    progress.sample(0);
    progress.recordsWritten = 0;
    expect(progress.rate(500)).toBe(0);
    progress.sample(1_000);
    progress.recordsWritten = 200;
    progress.sample(2_000);
    expect(progress.rate(2_000)).toBe(200);
  });
});
