import type { AliasRedirected, SluiceEvent } from '@sluice/core';

/** Which alias of which host an event is about (versions count per host, so they are compared per host). */
export function aliasSlot(event: AliasRedirected): string {
  return JSON.stringify([event.host, event.alias]);
}

/** Identity of an alias state: two events with the same identity describe the same redirect. */
export function aliasEventKey(event: AliasRedirected): string {
  return JSON.stringify([event.host, event.from, event.to, event.version ?? null, event.at]);
}

/**
 * True when `candidate` is older than `current` and must not replace it. Table versions decide when both have
 * one (they come from one alias table); otherwise the ISO timestamps do.
 */
export function isOlderAliasEvent(candidate: AliasRedirected, current: AliasRedirected): boolean {
  if (candidate.version !== undefined && current.version !== undefined)
    return candidate.version < current.version;
  return candidate.at < current.at;
}

/** Keeps the latest `AliasRedirected` per host and alias (in-process strategies use it for `latestAliasEvents`). */
export class LatestAliasEvents {
  readonly #latest = new Map<string, AliasRedirected>();

  /** Records `event` unless a newer one is already known; returns whether it was recorded. */
  offer(event: SluiceEvent): boolean {
    if (event.type !== 'AliasRedirected') return false;
    const current = this.#latest.get(aliasSlot(event));
    if (current && isOlderAliasEvent(event, current)) return false;
    this.#latest.set(aliasSlot(event), event);
    return true;
  }

  list(): AliasRedirected[] {
    return [...this.#latest.values()].sort(byHostAndAlias);
  }
}

/** Sort order of alias listings: by host, then alias. */
export function byHostAndAlias(a: AliasRedirected, b: AliasRedirected): number {
  if (a.host !== b.host) return a.host < b.host ? -1 : 1;
  return a.alias < b.alias ? -1 : a.alias > b.alias ? 1 : 0;
}
