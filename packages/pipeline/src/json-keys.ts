/**
 * A JSON object that names a key twice (`{"a":1,"a":2}`) is valid JSON, but `JSON.parse` keeps only the last value:
 * a copy would drop the others without a word. A source reports such a record as bad instead, naming the key.
 */

/**
 * The key a JSON text names twice in one object, or null. `value` is the text already parsed: when the text has no
 * more quote-colon pairs than the parsed value has keys, no key can have been given twice (every key is a string
 * followed by a colon), so most texts are never scanned.
 *
 * @example
 * ```ts
 * repeatedKey('{"a":1,"a":2}', { a: 2 }); // 'a'
 * repeatedKey('{"a":{"a":"x:y"}}', { a: { a: 'x:y' } }); // null (two objects, a colon in a string)
 * ```
 */
export function repeatedKey(text: string, value: unknown): string | null {
  if (colonsIn(text) <= keysIn(value)) return null;
  /** The keys seen so far of each open object (null for an open array), innermost last. */
  const open: (Set<string> | null)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b) open.push(new Set());
    else if (c === 0x5b) open.push(null);
    else if (c === 0x7d || c === 0x5d) open.pop();
    else if (c === 0x22) {
      const start = i;
      for (i++; i < text.length; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
      const keys = open.at(-1);
      if (!keys || !followedByColon(text, i + 1)) continue;
      // Decoded: "\u0061" and "a" are the same key.
      const key = JSON.parse(text.slice(start, i + 1)) as string;
      if (keys.has(key)) return key;
      keys.add(key);
    }
  }
  return null;
}

function followedByColon(text: string, from: number): boolean {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x3a) return true;
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
  }
  return false;
}

/**
 * How many times a quote is followed by a colon (whitespace between allowed): at least the number of keys, since
 * every key is a string followed by one. Counting bare colons sent every record holding a timestamp
 * (`"2026-01-01T00:00:00Z"`) to the full scan; a string that holds `\":` only makes the count larger (a scan, never a
 * miss).
 */
function colonsIn(text: string): number {
  let count = 0;
  for (let i = text.indexOf('"'); i >= 0; i = text.indexOf('"', i + 1)) {
    let j = i + 1;
    while (j < text.length) {
      const c = text.charCodeAt(j);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      j++;
    }
    if (text.charCodeAt(j) === 0x3a) count++;
  }
  return count;
}

/** Own keys of every object in a parsed JSON value. */
function keysIn(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  let count = 0;
  if (Array.isArray(value)) {
    for (const item of value) count += keysIn(item);
    return count;
  }
  for (const key of Object.keys(value)) count += 1 + keysIn((value as Record<string, unknown>)[key]);
  return count;
}
