/**
 * Field access by names that come from data or configuration (CSV headers, record keys, key fields, columns,
 * renames). A plain object inherits `__proto__`, `constructor`, `toString`…: `record[name]` for a field the
 * record lacks would return one of Object.prototype's members instead of `undefined`, and `record[name] = v`
 * with `__proto__` would set the prototype instead of adding a field. These helpers touch own fields only.
 */

/** The own field `name` of `object`, or `undefined` when it has none (never an inherited member). */
export function ownField<T>(object: Readonly<Record<string, T>>, name: string): T | undefined {
  return Object.hasOwn(object, name) ? object[name] : undefined;
}

/**
 * Sets the own field `name` of `object`, as `JSON.parse` would. Only `__proto__` needs `defineProperty` (it is
 * the one setter on Object.prototype); every other name takes the fast assignment.
 */
export function setOwnField<T>(object: Record<string, T>, name: string, value: T): void {
  if (name === '__proto__')
    Object.defineProperty(object, name, { value, writable: true, enumerable: true, configurable: true });
  else object[name] = value;
}
