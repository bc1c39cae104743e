const numbers = new Intl.NumberFormat('en-US');

export function count(n: number | null | undefined): string {
  return n === null || n === undefined ? '—' : numbers.format(n);
}

export function percent(ratio: number): string {
  return `${(ratio * 100).toFixed(1)} %`;
}

/** A timestamp as the operator reads it: local date and time, to the second. */
export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString('en-GB', { hour12: false });
}

/** How long ago, roughly ("12 s ago", "3 min ago"). */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—';
  const ms = now - new Date(iso).getTime();
  if (!Number.isFinite(ms)) return iso;
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86_400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86_400)} d ago`;
}

/** How long until, in whole seconds ("in 7 s"; "now" once due or while it is under way). */
export function until(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'now';
  const ms = new Date(iso).getTime() - now;
  if (!Number.isFinite(ms)) return iso;
  const s = Math.ceil(ms / 1000);
  return s <= 0 ? 'now' : `in ${s} s`;
}

/** A generation's name is `<endpoint>-<id>`: the id is what tells two generations apart. */
export function shortGeneration(name: string | null | undefined, endpoint: string): string {
  if (!name) return '—';
  return name.startsWith(`${endpoint}-`) ? name.slice(endpoint.length + 1) : name;
}
