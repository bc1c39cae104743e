/**
 * The transfer ids this node recently saw stored, at most `capacity` (the least recently seen are forgotten first).
 * A submit of one of them reads the record first — a client's resend is answered by one indexed read — and any
 * other id inserts first (docs/coordinator.md § Submitting inserts first). Only a choice of path: an id forgotten,
 * or removed from the store meanwhile, is still answered correctly by the other path.
 *
 * @example
 * ```ts
 * const seen = new RecentIds(10_000);
 * seen.add('t-1');
 * seen.has('t-1'); // true
 * ```
 */
export class RecentIds {
  readonly #ids = new Set<string>();
  readonly #capacity: number;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  has(id: string): boolean {
    return this.#ids.has(id);
  }

  add(id: string): void {
    // Re-inserted so a Set's insertion order is the order of last sight.
    this.#ids.delete(id);
    this.#ids.add(id);
    if (this.#ids.size > this.#capacity) {
      const oldest = this.#ids.values().next();
      if (!oldest.done) this.#ids.delete(oldest.value);
    }
  }
}
