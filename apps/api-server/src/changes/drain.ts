import type { ServerResponse } from 'node:http';

/**
 * Back-pressure on one response: resolves `true` once the socket has drained what was written, `false` when it
 * closed first or `timeoutMs` passed (the client stopped reading: the caller cuts it off). Listeners and the
 * timer are removed either way, so a long-lived feed that waits often leaks nothing.
 *
 * @example
 * ```ts
 * if (res.writableLength > limit && !(await waitForDrain(res, 30_000))) res.destroy();
 * ```
 */
export function waitForDrain(res: ServerResponse, timeoutMs: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => done(false), timeoutMs);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}
