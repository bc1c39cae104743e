/**
 * The chaos commands' flag parsing (`chaos`, `chaos:cdc`): one loop and one number rule for both, so a flag means
 * the same in each and an unknown one is refused naming every known flag.
 */

/** What a flag does: reads its value through `value()` (the next argument) when it takes one. */
export type FlagHandler = (value: () => string | undefined) => void;

/**
 * Runs the handler of each flag in `argv` in order; `--` (which pnpm passes through) is skipped, anything else
 * throws naming the known flags.
 *
 * @example
 * ```ts
 * parseFlags(['--seconds', '30', '--quiet'], {
 *   '--seconds': (value) => { options.seconds = nonNegativeInteger('--seconds', value()); },
 *   '--quiet': () => { options.verbose = false; },
 * });
 * ```
 */
export function parseFlags(argv: readonly string[], flags: Record<string, FlagHandler>): void {
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag === '--') continue;
    const handler = Object.hasOwn(flags, flag) ? flags[flag] : undefined;
    if (handler === undefined)
      throw new Error(`unknown argument ${flag} (known: ${Object.keys(flags).join(', ')})`);
    handler(() => argv[++i]);
  }
}

/** A flag's value as a non-negative integer; throws naming the flag otherwise. */
export function nonNegativeInteger(flag: string, value: string | undefined): number {
  const n = Number(value);
  if (value === undefined || value === '' || !Number.isInteger(n) || n < 0)
    throw new Error(`${flag} needs a non-negative integer`);
  return n;
}
