import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { messageOf } from './session.js';

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

/** What an operator's action did, for the status line next to its button. */
export type ActionOutcome = { kind: 'ok' | 'error'; text: string } | null;

/**
 * Runs one operator action at a time: `busy` while it runs (buttons disable), then its outcome — the server's code
 * and message when it was refused.
 */
export function useAction(): {
  busy: string | null;
  outcome: ActionOutcome;
  run: (label: string, action: () => Promise<string>) => Promise<void>;
} {
  const [busy, setBusy] = useState<string | null>(null);
  const [outcome, setOutcome] = useState<ActionOutcome>(null);
  const run = useCallback(async (label: string, action: () => Promise<string>) => {
    setBusy(label);
    setOutcome(null);
    try {
      setOutcome({ kind: 'ok', text: await action() });
    } catch (err) {
      setOutcome({ kind: 'error', text: `${label} failed — ${messageOf(err)}` });
    } finally {
      setBusy(null);
    }
  }, []);
  return { busy, outcome, run };
}

/**
 * Calls `load` now and every `everyMs` while the page is visible (no overlap: the next call waits for the last),
 * again at once when `deps` change. For lists the control API has no stream for.
 */
export function usePolling<T>(
  load: (signal: AbortSignal) => Promise<T>,
  everyMs: number,
  deps: unknown[],
): { data: T | null; error: unknown; refresh: () => void } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const once = async () => {
      try {
        const value = await loadRef.current(controller.signal);
        if (controller.signal.aborted) return;
        setData(value);
        setError(null);
      } catch (err) {
        if (controller.signal.aborted) return;
        setError(err);
      }
      if (!controller.signal.aborted) timer = setTimeout(once, document.hidden ? everyMs * 5 : everyMs);
    };
    void once();
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick, everyMs]);
  return { data, error, refresh: () => setTick((t) => t + 1) };
}
