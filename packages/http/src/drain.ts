import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/**
 * The drain a stopping server goes through before its graceful close, so a load balancer that health-checks
 * `/readyz` takes it out before it stops answering: once {@link ShutdownDrain.begin} ran, readiness is withdrawn
 * (the app's `/readyz` reads {@link ShutdownDrain.draining}) while every request is still served, each answer with
 * `Connection: close` so the client's next request opens a new connection — through the balancer, to a backend that
 * is still ready. Closing a kept-alive connection outright instead races the request its client may be sending on it
 * (reset, and lost); an idle connection's client learns nothing from a 503 either.
 *
 * @example
 * ```ts
 * const drain = new ShutdownDrain(app.server);
 * app.get('/readyz', (_request, reply) => reply.code(drain.draining ? 503 : 200).send({}));
 * // on SIGTERM (runCli): drain.begin(); wait http.drainDelayMs; then close the server.
 * ```
 */
export class ShutdownDrain {
  #draining = false;

  constructor(server: Pick<Server, 'prependListener'>) {
    // First of the 'request' listeners: the answer's headers are not written yet, whichever handler writes them
    // (fastify, or a fast route below it). Node then sends `Connection: close` and closes after the answer.
    server.prependListener('request', (_request: IncomingMessage, response: ServerResponse) => {
      if (this.#draining) response.shouldKeepAlive = false;
    });
  }

  /** True once the drain began: readiness is 503 from then on. */
  get draining(): boolean {
    return this.#draining;
  }

  /** Withdraws readiness and ends keep-alive; requests are still served. Idempotent. */
  begin(): void {
    this.#draining = true;
  }
}
