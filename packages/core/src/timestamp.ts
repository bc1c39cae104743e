/**
 * The one text form a `timestamp` field's values are stored, compared and served in. Values arrive spelled many
 * ways — PostgreSQL's `+09:00` offsets and microseconds, a client's `toISOString()` milliseconds, epoch numbers —
 * and text comparison of those spellings does not order them by time. Written in UTC at a fixed precision, the text
 * of an instant is unique and its byte order is time order (for years 0001–9999), so equality, ranges, sorting,
 * index keys and cursors all work on plain strings.
 */

/**
 * ISO 8601 date, optionally a time (`T`, `t` or a space), optional seconds and fraction (`.` or `,`), optional zone
 * (`Z`, `±HH`, `±HH:MM`, `±HHMM`, `±HH:MM:SS` — PostgreSQL prints historic local-mean-time offsets with seconds).
 */
const ISO =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?(?:([Zz])|([+-])(\d{2})(?::?(\d{2})(?::(\d{2}))?)?)?)?$/;

/** 0001-01-01T00:00:00Z and 10000-01-01T00:00:00Z: the instants a four-digit year can write. */
const MIN_MS = -62_135_596_800_000;
const END_MS = 253_402_300_800_000;

const pad = (n: number, width: number) => String(n).padStart(width, '0');

/** The canonical text of `ms` (whole milliseconds since the epoch) plus `micros` (0–999), or null out of range. */
function format(ms: number, micros: number): string | null {
  if (!(ms >= MIN_MS && ms < END_MS)) return null;
  const d = new Date(ms);
  return (
    `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}` +
    `T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}` +
    `.${pad(d.getUTCMilliseconds(), 3)}${pad(micros, 3)}Z`
  );
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Milliseconds since the epoch of a UTC calendar date (any year: `Date.UTC` maps years 0–99 to 19xx). */
function utcDayMs(year: number, month: number, day: number): number {
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  return d.getTime();
}

function parseText(text: string): string | null {
  const m = ISO.exec(text);
  if (m === null) return null;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4] ?? 0);
  const minute = Number(m[5] ?? 0);
  const second = Number(m[6] ?? 0);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59) return null;
  // A zone may only follow a time; none at all means UTC (PostgreSQL's `timestamp without time zone`).
  let offsetSeconds = 0;
  if (m[9] !== undefined) {
    const oh = Number(m[10]);
    const om = Number(m[11] ?? 0);
    const os = Number(m[12] ?? 0);
    if (oh > 23 || om > 59 || os > 59) return null;
    offsetSeconds = (m[9] === '-' ? -1 : 1) * (oh * 3600 + om * 60 + os);
  }
  // Microseconds are kept; digits past them are cut (no source Sluice reads has more).
  const fraction = `${m[7] ?? ''}000000`.slice(0, 6);
  const ms =
    utcDayMs(year, month, day) +
    ((hour * 60 + minute) * 60 + second - offsetSeconds) * 1000 +
    Number(fraction.slice(0, 3));
  return format(ms, Number(fraction.slice(3)));
}

function fromNumber(value: number): string | null {
  if (!Number.isFinite(value)) return null;
  // Milliseconds since the epoch; a fraction of one is kept to the microsecond.
  const micros = Math.round(value * 1000);
  if (!Number.isSafeInteger(micros)) return null;
  const ms = Math.floor(micros / 1000);
  return format(ms, micros - ms * 1000);
}

/**
 * The canonical text of a timestamp value — `YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC, microseconds — or null when it is
 * not one. Accepted: ISO 8601 text (date, or date and time with optional seconds, fraction and zone; no zone means
 * UTC; digits past the microsecond are cut), and finite numbers as milliseconds since the Unix epoch. The instant
 * must fall in the years 0001–9999 (UTC). Two values denote the same instant exactly when their canonical texts
 * are equal, and canonical texts order as their instants.
 *
 * @example
 * ```ts
 * canonicalTimestamp('2026-12-06T08:33:49.737383+09:00'); // '2026-12-05T23:33:49.737383Z'
 * canonicalTimestamp('2026-12-05T23:33:49.737Z'); // '2026-12-05T23:33:49.737000Z'
 * canonicalTimestamp('2026-12-05 23:33:49'); // '2026-12-05T23:33:49.000000Z' (no zone: UTC)
 * canonicalTimestamp(0); // '1970-01-01T00:00:00.000000Z'
 * canonicalTimestamp('yesterday'); // null
 * ```
 */
export function canonicalTimestamp(value: unknown): string | null {
  if (typeof value === 'string') return value.length > 64 ? null : parseText(value);
  if (typeof value === 'number') return fromNumber(value);
  return null;
}

/** Whether `value` is a timestamp {@link canonicalTimestamp} accepts (ISO 8601 text or epoch milliseconds). */
export function isTimestamp(value: unknown): boolean {
  return canonicalTimestamp(value) !== null;
}
