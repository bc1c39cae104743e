import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { isUnauthorized, messageOf } from './session.js';

/** The page the location's hash names (`#/transfers/abc` → `['transfers', 'abc']`), following changes. */
export function useHashRoute(): string[] {
  const read = () =>
    window.location.hash
      .replace(/^#\/?/, '')
      .split('/')
      .filter((part) => part !== '')
      .map((part) => decodeURIComponent(part));
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const onChange = () => setRoute(read());
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/** The time now, refreshed every `everyMs` while `active` (a countdown on the page); else the time of the last render. */
export function useNow(active: boolean, everyMs = 1_000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!active) return;
    setNow(Date.now());
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [active, everyMs]);
  return active ? now : Date.now();
}

/** What an operator's action did, for the status line next to its button. */
export type ActionOutcome = { kind: 'ok' | 'error'; text: string } | null;

/**
 * Runs one operator action at a time: `busy` while it runs (buttons disable; a second call meanwhile — a double
 * click — is ignored, not sent), then its outcome — the server's code and message when it was refused. A 401 (the
 * token expired or was revoked since the page got it) goes to `onUnauthorized`: back to the token prompt.
 */
export function useAction(onUnauthorized?: () => void): {
  busy: string | null;
  outcome: ActionOutcome;
  run: (label: string, action: () => Promise<string>) => Promise<void>;
} {
  const [busy, setBusy] = useState<string | null>(null);
  const [outcome, setOutcome] = useState<ActionOutcome>(null);
  // The state above re-renders later; this stops a second call in the same turn.
  const running = useRef(false);
  const unauthorized = useRef(onUnauthorized);
  unauthorized.current = onUnauthorized;
  const run = useCallback(async (label: string, action: () => Promise<string>) => {
    if (running.current) return;
    running.current = true;
    setBusy(label);
    setOutcome(null);
    try {
      setOutcome({ kind: 'ok', text: await action() });
    } catch (err) {
      if (isUnauthorized(err) && unauthorized.current) unauthorized.current();
      else setOutcome({ kind: 'error', text: `${label} failed — ${messageOf(err)}` });
    } finally {
      running.current = false;
      setBusy(null);
    }
  }, []);
  return { busy, outcome, run };
}

/** What a polled page shows: the last answer, the last poll's error, and whether that answer is stale. */
export interface Polled<T> {
  /** The last answer to the current `deps` (kept beside a failed poll), or null before the first. */
  data: T | null;
  /** Why the last poll failed, or null when it answered. */
  error: unknown;
  /**
   * `data` is what an earlier poll read and the last one failed (the app-server is down or restarting): the page
   * shows it marked stale and offers no action from it, as the Endpoints page does while its stream is lost.
   */
  stale: boolean;
  /** When `data` was read (epoch ms), or null. */
  readAt: number | null;
  refresh: () => void;
}

/**
 * How long one poll may go unanswered before the page counts it failed (and shows its data as stale): two of its
 * intervals, and never under 5 s, so a slow answer of a busy node is not taken for a lost one.
 */
export function pollDeadlineMs(everyMs: number): number {
  return Math.max(5_000, 2 * everyMs);
}

/** A poll the app-server did not answer within its deadline: said as such, not as the abort that ended it. */
class PollUnanswered extends Error {
  constructor(deadlineMs: number) {
    super(`the app-server did not answer within ${deadlineMs / 1000} s`);
    this.name = 'PollUnanswered';
  }
}

/**
 * Calls `load` now and every `everyMs` while the page is visible (no overlap: the next call waits for the last),
 * again at once when `deps` change. For lists the control API has no stream for. What it returns always answers the
 * current `deps`: when they change, the last answer (and error) is dropped, not shown under the new question.
 */
export function usePolling<T>(
  load: (signal: AbortSignal) => Promise<T>,
  everyMs: number,
  deps: unknown[],
): Polled<T> {
  const deadlineMs = pollDeadlineMs(everyMs);
  // Each answer is kept with the deps it answered, so one for other deps is never returned (not even for the one
  // render before the next load starts).
  const [answer, setAnswer] = useState<{
    deps: unknown[];
    data: T | null;
    readAt: number | null;
    error: unknown;
  }>({
    deps,
    data: null,
    readAt: null,
    error: null,
  });
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const once = async () => {
      // A poll unanswered past its deadline (the app-server frozen, or a path lost without a reset) fails like a
      // refused one: the client's own deadline (30 s) is far longer than the interval the page says it refreshes at.
      const poll = new AbortController();
      const stop = () => poll.abort();
      controller.signal.addEventListener('abort', stop, { once: true });
      const deadline = setTimeout(() => poll.abort(), deadlineMs);
      try {
        const value = await loadRef.current(poll.signal);
        if (controller.signal.aborted) return;
        setAnswer({ deps, data: value, readAt: Date.now(), error: null });
      } catch (caught) {
        if (controller.signal.aborted) return;
        const err = poll.signal.aborted ? new PollUnanswered(deadlineMs) : caught;
        // The last data stays beside the error (a poll that failed once), as long as it answers these deps.
        setAnswer((last) =>
          sameDeps(last.deps, deps)
            ? { ...last, error: err }
            : { deps, data: null, readAt: null, error: err },
        );
      } finally {
        clearTimeout(deadline);
        controller.signal.removeEventListener('abort', stop);
      }
      if (!controller.signal.aborted) timer = setTimeout(once, document.hidden ? everyMs * 5 : everyMs);
    };
    void once();
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick, everyMs]);
  const current = sameDeps(answer.deps, deps);
  const data = current ? answer.data : null;
  const error = current ? answer.error : null;
  return {
    data,
    error,
    stale: data !== null && error !== null,
    readAt: current ? answer.readAt : null,
    refresh: () => setTick((t) => t + 1),
  };
}

function sameDeps(a: unknown[], b: unknown[]): boolean {
  return a.length === b.length && a.every((dep, i) => Object.is(dep, b[i]));
}
