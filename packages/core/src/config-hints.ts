// What a configuration error adds to zod's words for the mistakes people make when writing a file by hand: the key
// a misspelt one resembles, and that a key left out is required (zod says "received undefined").
import type { z } from 'zod';

/** Most edits between a misspelt key and the key suggested for it (`indexs` → `indexes` is one). */
const MAX_EDITS = 2;

type SchemaDef = {
  type: string;
  shape?: Record<string, z.ZodType>;
  innerType?: z.ZodType;
  in?: z.ZodType;
  element?: z.ZodType;
  valueType?: z.ZodType;
  options?: z.ZodType[];
};

const defOf = (schema: z.ZodType): SchemaDef => (schema as unknown as { _zod: { def: SchemaDef } })._zod.def;

/** The schemas at `path` below `schema`, through wrappers, arrays, records and every union alternative. */
function schemasAt(schema: z.ZodType, path: ReadonlyArray<PropertyKey>): z.ZodType[] {
  const def = defOf(schema);
  const inner = def.innerType ?? (def.type === 'pipe' ? def.in : undefined);
  if (inner !== undefined) return schemasAt(inner, path);
  if (def.type === 'union') return (def.options ?? []).flatMap((option) => schemasAt(option, path));
  if (path.length === 0) return [schema];
  const [head, ...rest] = path;
  if (def.type === 'object' && typeof head === 'string' && def.shape && Object.hasOwn(def.shape, head))
    return schemasAt(def.shape[head] as z.ZodType, rest);
  if (def.type === 'array' && typeof head === 'number' && def.element) return schemasAt(def.element, rest);
  if (def.type === 'record' && def.valueType) return schemasAt(def.valueType, rest);
  return [];
}

/** The keys the object schema(s) at `path` accept. */
function knownKeysAt(schema: z.ZodType, path: ReadonlyArray<PropertyKey>): string[] {
  const keys = new Set<string>();
  for (const at of schemasAt(schema, path)) {
    const def = defOf(at);
    if (def.type === 'object' && def.shape) for (const key of Object.keys(def.shape)) keys.add(key);
  }
  return [...keys];
}

/** Levenshtein distance, case-insensitive (`primarykey` is `primaryKey` misspelt by nothing but case). */
function editsBetween(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let previous = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const current = [i];
    for (let j = 1; j <= y.length; j++)
      current[j] = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1),
      );
    previous = current;
  }
  return previous[y.length] as number;
}

/**
 * The known key of the object at `path` that `key` most likely misspells, or `undefined` when none is close: at
 * most {@link MAX_EDITS} edits, and fewer than half the key's length (so `id` is not suggested for `ab`).
 *
 * @example
 * ```ts
 * suggestKey(SluiceConfigSchema, ['endpoints', 0], 'indexs'); // 'indexes'
 * ```
 */
export function suggestKey(
  schema: z.ZodType,
  path: ReadonlyArray<PropertyKey>,
  key: string,
): string | undefined {
  let best: { key: string; edits: number } | undefined;
  for (const known of knownKeysAt(schema, path)) {
    const edits = editsBetween(key, known);
    if (edits > MAX_EDITS || edits * 2 >= Math.max(key.length, known.length)) continue;
    if (best === undefined || edits < best.edits) best = { key: known, edits };
  }
  return best?.key;
}

/**
 * True when `path` names a key absent from its parent object in `input` (the key was left out, not given a value
 * of the wrong type).
 *
 * @example
 * ```ts
 * isMissing({ endpoints: [{ name: 'c' }] }, ['endpoints', 0, 'primaryKey']); // true
 * ```
 */
export function isMissing(input: unknown, path: ReadonlyArray<PropertyKey>): boolean {
  if (path.length === 0) return false;
  let parent = input;
  for (const segment of path.slice(0, -1)) {
    if (parent === null || typeof parent !== 'object') return false;
    parent = (parent as Record<PropertyKey, unknown>)[segment];
  }
  if (parent === null || typeof parent !== 'object' || Array.isArray(parent)) return false;
  const last = path[path.length - 1] as PropertyKey;
  return !Object.hasOwn(parent, last) || (parent as Record<PropertyKey, unknown>)[last] === undefined;
}
