/**
 * The parts of the tests of a change feed cut off inside a blue/green switch's merge (feed-switch-resume*.test.ts):
 * an api-server in its own process over a feed-writer's root, the switch as one subscriber saw it, and every point
 * of the merge it could have been cut off at.
 */
import type { TempDir } from '@sluice/testkit';
import type { FeedWriter } from './feed-harness.js';
import { type SpawnedApiServer, spawnApiServer, writeConfig } from './helpers.js';
import type { SseConnection, SseEvent } from './sse.js';

/** The `items` endpoint's change feed on `base`, with these query parameters. */
export function feedUrl(base: string, params: Record<string, string> = {}): string {
  const query = new URLSearchParams(params).toString();
  return `${base}/v1/endpoints/items/changes${query ? `?${query}` : ''}`;
}

/**
 * An api-server in its own process (as in production: the test's readers must not share its event loop) serving
 * the writer's root, with `config` added to the sluice.yaml (e.g. `api.auth`).
 *
 * @example
 * ```ts
 * await using api = await spawnFeedApi(dir, writer, { api: { auth: { jwtSecret } } });
 * ```
 */
export async function spawnFeedApi(
  dir: TempDir,
  writer: FeedWriter,
  config: Record<string, unknown> = {},
): Promise<SpawnedApiServer> {
  return spawnApiServer(await writeConfig(dir.path, { dataDir: writer.root, ...config }));
}

/** The first value of an `upsert`'s or `delete`'s key (undefined for other events). */
export function keyOf(event: SseEvent): unknown {
  return (event.data as { key?: unknown[] } | null)?.key?.[0];
}

/** One switch as a subscriber received it: `switch`, the merge, then the `commit` that ends it. */
export interface SwitchSeen {
  /** Where the `switch` event is in the subscriber's events. */
  switchAt: number;
  /** Where the `commit` ending the merge is. */
  commitAt: number;
  /** The events of the merge (between the two). */
  merge: SseEvent[];
}

/**
 * Waits until `feed` has received a `switch` (the first at or after `from`) and the `commit` that ends its merge.
 *
 * @example
 * ```ts
 * const seen = await waitForSwitch(feed);
 * const token = seen.merge[0]!.id!; // the token every event of the merge carries
 * ```
 */
export async function waitForSwitch(feed: SseConnection, from = 0): Promise<SwitchSeen> {
  const switched = await feed.waitForEvent((e) => e.event === 'switch', { from });
  const switchAt = feed.events.indexOf(switched, from);
  const commit = await feed.waitForEvent((e) => e.event === 'commit', { from: switchAt });
  const commitAt = feed.events.indexOf(commit, switchAt);
  return { switchAt, commitAt, merge: feed.events.slice(switchAt + 1, commitAt) };
}

/**
 * Every prefix of `events` a subscriber cut off inside the merge may hold: up to and including each event of it.
 * All of them carry the same token, so one resume must serve each.
 */
export function cutsInMerge(events: SseEvent[], seen: SwitchSeen): SseEvent[][] {
  return seen.merge.map((_, i) => events.slice(0, seen.switchAt + 2 + i));
}
