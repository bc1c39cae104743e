/**
 * `await using` for the client's async generators. TypeScript's `esnext.disposable` lib types every async generator
 * as `AsyncDisposable`, so `await using feed = items.changes()` compiles; but runtimes without the explicit resource
 * management proposal (Node 20, browsers before it) give generators no `Symbol.asyncDispose`, and the statement then
 * throws "Object not disposable." at run time. Internal to the package.
 */

/**
 * `generator`, given a `Symbol.asyncDispose` that ends it (as `break` does: its `finally` blocks run, a change
 * feed's connection closes) when the runtime knows the symbol (or a polyfill defined it) and the generator has none.
 *
 * @example
 * ```ts
 * changes(options) { return disposable(this.feed(options)); }
 * // a caller: { await using feed = items.changes(); … } — the feed's connection is closed at the block's end
 * ```
 */
export function disposable<T>(generator: AsyncGenerator<T>): AsyncGenerator<T> {
  // Looked up at each call, not at import: a polyfill may define the symbol after this module loaded.
  const dispose = (Symbol as { asyncDispose?: symbol }).asyncDispose;
  if (typeof dispose === 'symbol' && !(dispose in generator))
    Object.defineProperty(generator, dispose, {
      value: async () => {
        await generator.return(undefined);
      },
      configurable: true,
      writable: true,
    });
  return generator;
}
