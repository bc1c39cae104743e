/**
 * Whether the console's Server-Sent Event connection is up. `@sluice/client`'s streams reconnect by themselves and
 * say when a connection opens (`onOpen`), but not when one is lost: between the two the page would keep calling a
 * picture "live" that nothing updates any more (the app-server stopped, restarted, or the network dropped). The
 * client takes the `fetch` it uses, so the console watches its event-stream requests there, at the transport,
 * rather than guessing from silence.
 */

/** Why the stream is not up, for the page's status line. */
export type StreamLinkLoss = 'unreachable' | 'refused' | 'closed';

/**
 * A `fetch` that behaves as `base` and calls `onLoss` when a request for an event stream (`accept:
 * text/event-stream`) cannot connect, is answered with an error, or its open response ends or breaks — also when
 * the client aborted it (it replaces a connection gone silent that way), so a caller that stops the stream on
 * purpose ignores what follows.
 *
 * @example
 * ```ts
 * const client = createClient({
 *   controlUrl: location.origin,
 *   fetch: watchStreamLink(globalThis.fetch.bind(globalThis), (why) => setLive(false)),
 * });
 * ```
 */
export function watchStreamLink(base: typeof fetch, onLoss: (why: StreamLinkLoss) => void): typeof fetch {
  return async (input, init) => {
    if (new Headers(init?.headers).get('accept') !== 'text/event-stream') return base(input, init);
    let res: Response;
    try {
      res = await base(input, init);
    } catch (err) {
      onLoss('unreachable');
      throw err;
    }
    if (!res.ok || !res.body) {
      onLoss('refused');
      return res;
    }
    // The same answer with its body read through a watch: the end of the body is the end of the connection.
    return new Response(
      watchedBody(res.body, () => onLoss('closed')),
      {
        status: res.status,
        statusText: res.statusText,
        headers: res.headers,
      },
    );
  };
}

/** `body`, read on demand, calling `onEnd` once when it ends or fails. */
function watchedBody(body: ReadableStream<Uint8Array>, onEnd: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    onEnd();
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const { value, done } = await reader.read();
          if (done) {
            end();
            controller.close();
          } else controller.enqueue(value);
        } catch (err) {
          end();
          controller.error(err);
        }
      },
      // Cancelled by its reader (the client replacing an idle connection, or stopping): the connection is gone.
      cancel: (reason) => {
        end();
        return reader.cancel(reason);
      },
    },
    // Pulled only when the client asks, so the watch never reads ahead of it.
    { highWaterMark: 0 },
  );
}
