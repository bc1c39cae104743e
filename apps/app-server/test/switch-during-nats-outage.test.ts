/**
 * An endpoint rebuilt while the app-server's nats-server is down: the switch itself goes ahead (the alias table
 * moves; nothing waits for NATS) and its `AliasRedirected`, which could not be published then, is published once
 * NATS is back — heard by a subscriber that was there all along and kept for processes that start later. A real
 * app-server process and a real nats-server, killed and started again on the same port and store.
 */
import { join } from 'node:path';
import { createNatsBackplane } from '@sluice/backplane';
import type { SluiceEvent } from '@sluice/core';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  localNode,
  observeEvents,
  rebuildWithoutBackplane,
  servingItems,
  startNodeProcess,
  writeRecords,
} from './helpers.js';

const redirectedTo = (events: SluiceEvent[], cache: string) =>
  events.some((e) => e.type === 'AliasRedirected' && e.to === cache);

describe('an alias switch while NATS is down', () => {
  it('defect: the AliasRedirected of a switch made during a NATS outage was never published once NATS was back', {
    timeout: 90_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-switch-outage-');
    const source = await writeRecords(join(dir.path, 'items.jsonl'), 200);
    await using observer = await observeEvents(nats.url);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      nats: nats.url,
      extraYaml: [
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
      ].join('\n'),
    });
    const first = await waitFor(() => servingItems(node.url), {
      timeoutMs: 30_000,
      what: 'the first generation to serve',
    });
    await waitFor(() => redirectedTo(observer.events, first), { what: 'the first redirect on NATS' });

    await nats.kill();
    const second = await rebuildWithoutBackplane(node.url, first);

    await nats.start();
    await waitFor(() => redirectedTo(observer.events, second), {
      timeoutMs: 20_000,
      what: 'the redirect of the switch made during the outage, once NATS is back',
    });
    // A process that starts now (an api-server of the host, the console's reader) reads the same state.
    await using late = await createNatsBackplane({ nats: nats.url, clusterName: 'sluice', nodeId: 'late' });
    expect((await late.latestAliasEvents()).map((e) => (e.type === 'AliasRedirected' ? e.to : null))).toEqual(
      [second],
    );
  });
});
