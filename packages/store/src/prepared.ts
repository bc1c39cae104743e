import { InternalError } from '@sluice/core';
import type { Compilable, CompiledQuery } from 'kysely';

const SENTINEL = '\u0000sluice-param:';

/**
 * A named placeholder for a query compiled once by {@link prepareQuery}. Typed as the column's type so the
 * kysely builder type-checks the query; at run time it is a sentinel string.
 */
export function param<T>(name: string): T {
  return `${SENTINEL}${name}` as unknown as T;
}

type Slot = { name: string } | { value: unknown };

/** A query compiled once, bound to fresh values per call without rebuilding or recompiling it. */
export interface PreparedQuery<N extends string, R> {
  /** The SQL text, the same on every call. */
  readonly sql: string;
  bind(values: Readonly<Record<N, unknown>>): CompiledQuery<R>;
}

/**
 * Compiles `query` (built with {@link param} placeholders) once. The hot paths of the store run the same
 * SQL text every time, which also lets the SQLite statement cache and PostgreSQL plans be reused.
 *
 * @example
 * ```ts
 * const byId = prepareQuery<'id', TransferRow>(db.selectFrom('transfers').selectAll().where('id', '=', param('id')));
 * const { rows } = await db.executeQuery(byId.bind({ id: 'orders-1' }));
 * ```
 */
export function prepareQuery<N extends string, R>(query: Compilable<R> | Compilable): PreparedQuery<N, R> {
  const compiled = query.compile() as CompiledQuery<R>;
  const slots: Slot[] = compiled.parameters.map((value) =>
    typeof value === 'string' && value.startsWith(SENTINEL)
      ? { name: value.slice(SENTINEL.length) }
      : { value },
  );
  return {
    sql: compiled.sql,
    bind(values) {
      const parameters = slots.map((slot) => {
        if (!('name' in slot)) return slot.value;
        const value = values[slot.name as N];
        if (value === undefined) throw new InternalError(`Missing query parameter "${slot.name}"`);
        return value;
      });
      return { ...compiled, parameters };
    },
  };
}
