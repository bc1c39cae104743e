import { describe, expect, it } from 'vitest';
import { createClient } from './client.js';
import { ClientErrorCode, SluiceClientError } from './errors.js';

/** A fetch whose answers come `delayMs` late (and end at once when the request is aborted). */
function lateFetch(delayMs: number): typeof fetch {
  return (_input, init) =>
    new Promise<Response>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          resolve(
            new Response(JSON.stringify({ endpoint: 'items', changed: true, from: 'a', to: 'b' }), {
              status: 200,
              headers: { 'content-type': 'application/json' },
            }),
          ),
        delayMs,
      );
      init?.signal?.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(init.signal?.reason);
      });
    });
}

describe('steering deadlines', () => {
  it('a promote or rollback outlasts the client timeoutMs (the server answers within switch.handoverWaitMs), a read does not', async () => {
    const client = createClient({
      controlUrl: 'http://sluice.invalid',
      timeoutMs: 100,
      fetch: lateFetch(400),
    });
    await expect(client.control.promote('items')).resolves.toMatchObject({ changed: true, to: 'b' });
    await expect(client.control.rollback('items', { from: 'b' })).resolves.toMatchObject({ changed: true });
    const read = await client.control.generations('items').catch((err: unknown) => err);
    expect(read).toBeInstanceOf(SluiceClientError);
    expect((read as SluiceClientError).code).toBe(ClientErrorCode.TIMEOUT);
    // Its own timeoutMs is kept.
    const own = await client.control.promote('items', { timeoutMs: 50 }).catch((err: unknown) => err);
    expect((own as SluiceClientError).code).toBe(ClientErrorCode.TIMEOUT);
  });
});
