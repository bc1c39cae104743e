import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'; // Crockford base32, lower case

let lastTime = -1;
let lastRandom: number[] = [];

function encodeTime(ms: number): string {
  let out = '';
  for (let i = 0; i < 10; i++) {
    out = ALPHABET[ms % 32]! + out;
    ms = Math.floor(ms / 32);
  }
  return out;
}

function nextRandom(time: number): number[] {
  if (time === lastTime) {
    // Same millisecond: increment, so names made in one millisecond still sort in creation order.
    const next = [...lastRandom];
    for (let i = next.length - 1; i >= 0; i--) {
      if (next[i]! < 31) {
        next[i]! += 1;
        break;
      }
      next[i] = 0;
    }
    return next;
  }
  return [...randomBytes(16)].map((b) => b % 32);
}

/**
 * A unique cache name for an endpoint: `<endpoint>-<time><random>`, where the 26-character suffix (a ULID in
 * lower-case Crockford base32) sorts by creation time. Contains no `.` (LMDB would take the path for a file).
 *
 * @example
 * ```ts
 * newCacheName('items'); // 'items-01jf3q0v9s6k2m8c4r1x7b5n2d'
 * ```
 */
export function newCacheName(endpoint: string, now: number = Date.now()): string {
  const time = Math.max(now, lastTime);
  const random = nextRandom(time);
  lastTime = time;
  lastRandom = random;
  return `${endpoint.replaceAll('.', '_')}-${encodeTime(time)}${random.map((d) => ALPHABET[d]).join('')}`;
}

/** The id {@link newCacheName} ends a name with: 26 characters of lower-case Crockford base32. */
const CACHE_ID = /^[0-9a-hjkmnp-tv-z]{26}$/;

/**
 * Whether `name` is a name {@link newCacheName} could have given a generation of `endpoint`: `<endpoint>-<id>`
 * (with the endpoint's `.` as `_`). Nothing else is ever a generation name, so a name that fails this was never
 * handed out: whoever sent it (a change-feed token, a cursor) sent bad input, not a generation that is gone.
 *
 * @example
 * ```ts
 * isCacheNameOf('items', newCacheName('items')); // true
 * isCacheNameOf('items', 'items'); // false: the alias, not a generation
 * ```
 */
export function isCacheNameOf(endpoint: string, name: string): boolean {
  const prefix = `${endpoint.replaceAll('.', '_')}-`;
  return (
    name.length === prefix.length + 26 && name.startsWith(prefix) && CACHE_ID.test(name.slice(prefix.length))
  );
}

/** The creation-time-sortable suffix of a cache name. */
export function nameSuffix(name: string): string {
  return name.slice(-26);
}
