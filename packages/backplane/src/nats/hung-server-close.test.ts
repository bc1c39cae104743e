/**
 * Ending an event subscription, and closing the backplane, while the nats-server hangs (SIGSTOP: every connection
 * still counts as up, nothing is answered). The subscriber is going away (a process shutting down): its close must
 * not wait for the server's confirmation of the unsubscribe, and once it has ended, no event reaches its handler —
 * not even one the server delivers after it runs again.
 */
import { aliasRedirected, type SluiceEvent } from '@sluice/core';
import { startNatsServer } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createNatsBackplane } from '../index.js';

/** How long a close may take here before it counts as hung: many operation timeouts. */
const HUNG_AFTER_MS = 20_000;
const OPERATION_TIMEOUT_MS = 1_000;

/** Whether `promise` settles before {@link HUNG_AFTER_MS}: `settled`, or `hung`. */
async function settles(promise: Promise<unknown>): Promise<'settled' | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), HUNG_AFTER_MS);
  });
  try {
    return await Promise.race([promise.then(() => 'settled' as const), hung]);
  } finally {
    clearTimeout(timer);
  }
}

describe('closing while the nats-server hangs', () => {
  it('defect: closing an event subscription while the nats-server hung never resolved', {
    timeout: 60_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using subscriber = await createNatsBackplane({
      nats: nats.url,
      clusterName: 'sluice',
      nodeId: 'subscriber',
      aliasHost: 'h1',
      operationTimeoutMs: OPERATION_TIMEOUT_MS,
    });
    await using publisher = await createNatsBackplane({
      nats: nats.url,
      clusterName: 'sluice',
      nodeId: 'publisher',
    });
    const heard: SluiceEvent[] = [];
    const registration = await subscriber.subscribe((event) => void heard.push(event), {
      types: ['AliasRedirected'],
    });

    nats.pause();
    let closing: 'settled' | 'hung';
    try {
      closing = await settles(registration.close());
    } finally {
      nats.resume();
    }
    // Before: 'hung' (the close waited for the server to confirm the drain of the subscription).
    expect(closing).toBe('settled');

    // The server runs again: what is published now does not reach the closed subscription.
    await publisher.publish(
      aliasRedirected({ host: 'h1', alias: 'items', from: 'a', to: 'b', checkpoint: null }),
    );
    await using witness = await createNatsBackplane({
      nats: nats.url,
      clusterName: 'sluice',
      nodeId: 'witness',
    });
    expect(
      (await witness.latestAliasEvents()).map((e) => (e.type === 'AliasRedirected' ? e.to : e.type)),
    ).toEqual(['b']);
    expect(heard).toEqual([]);
    expect(await settles(subscriber.close())).toBe('settled');
  });
});
