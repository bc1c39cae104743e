/**
 * Shared helpers of core's tests. Core cannot use `@sluice/testkit` (testkit depends on core), so the one
 * helper its tests need lives here rather than in a copy per test file.
 */

/** The error `fn` throws; fails the test when it returns. */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected the call to throw');
}
