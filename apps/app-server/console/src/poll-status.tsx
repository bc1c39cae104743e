import type { Polled } from './hooks.js';

/**
 * The status line of a polled page: how often it refreshes (after `summary`, what the data says, e.g. "2 of 3
 * alive"), or — once a refresh fails with data on the page — that what it shows is stale and from when, never the
 * summary of that stale data as if it were current (the Endpoints page's "Not live" for its stream).
 */
export function PollStatus(props: { polled: Polled<unknown>; everyMs: number; summary?: string | null }) {
  const { polled } = props;
  if (polled.stale)
    return (
      <p class="stale" role="status">
        Not live: the last refresh failed; showing what was read at{' '}
        {polled.readAt === null
          ? '—'
          : new Date(polled.readAt).toLocaleTimeString('en-GB', { hour12: false })}
        , retrying every {props.everyMs / 1000} s
      </p>
    );
  const every = `every ${props.everyMs / 1000} s`;
  let text = `Refreshed ${every}`;
  if (polled.data === null && polled.error === null) text = 'Loading…';
  else if (props.summary) text = `${props.summary} · refreshed ${every}`;
  return (
    <p class="muted" role="status">
      {text}
    </p>
  );
}

/** The attributes of what a polled page shows from its data: greyed and busy while that data is stale. */
export function staleMarks(polled: Polled<unknown>, base = ''): { class: string; 'aria-busy'?: 'true' } {
  return polled.stale ? { class: `${base} stale`.trim(), 'aria-busy': 'true' } : { class: base };
}
