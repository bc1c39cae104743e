import type { SluiceClient } from '@sluice/client';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { useHashRoute } from './hooks.js';
import { EndpointsPage } from './pages/endpoints.js';
import { NodesPage } from './pages/nodes.js';
import { TransferDetail, TransfersPage } from './pages/transfers.js';
import { type Access, PromptReason, probe, storedToken, storeToken } from './session.js';
import { TokenPrompt } from './token-prompt.js';

const PAGES = [
  { path: 'endpoints', title: 'Endpoints' },
  { path: 'transfers', title: 'Transfers' },
  { path: 'nodes', title: 'Nodes' },
] as const;

/**
 * The console: asks the control API whether it needs a token (401 → the prompt, and nothing else is shown), then
 * the Endpoints, Transfers and Nodes pages over `@sluice/client`.
 */
export function App() {
  const [access, setAccess] = useState<Access | { kind: 'checking' }>({ kind: 'checking' });
  const check = useCallback(async (token: string | undefined) => {
    setAccess({ kind: 'checking' });
    const outcome = await probe(token);
    if (outcome.kind === 'granted') storeToken(token);
    else if (outcome.kind === 'token-needed') storeToken(undefined);
    setAccess(outcome);
  }, []);
  useEffect(() => {
    void check(storedToken());
  }, [check]);
  // A token that stops working mid-session (expired, revoked): back to the prompt, saying so.
  const onUnauthorized = useCallback(() => {
    storeToken(undefined);
    setAccess({ kind: 'token-needed', reason: PromptReason.expired });
  }, []);

  if (access.kind === 'checking')
    return (
      <main class="centered">
        <p role="status">Connecting to the control API…</p>
      </main>
    );
  if (access.kind === 'token-needed')
    return <TokenPrompt reason={access.reason} onSubmit={(token) => void check(token)} />;
  if (access.kind === 'unreachable')
    return (
      <main class="centered">
        <h1>Sluice console</h1>
        <p role="alert">The control API did not answer: {access.message}</p>
        <button type="button" onClick={() => void check(storedToken())}>
          Try again
        </button>
      </main>
    );
  return (
    <Shell
      client={access.client}
      token={access.token}
      signedIn={access.token !== undefined}
      onSignOut={() => {
        storeToken(undefined);
        void check(undefined);
      }}
      onUnauthorized={onUnauthorized}
    />
  );
}

function Shell(props: {
  client: SluiceClient;
  token: string | undefined;
  signedIn: boolean;
  onSignOut: () => void;
  onUnauthorized: () => void;
}) {
  const route = useHashRoute();
  const page = PAGES.find((p) => p.path === route[0]) ?? PAGES[0];
  useEffect(() => {
    document.title = `${page.title} · Sluice console`;
  }, [page]);
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Sluice console</span>
        <nav aria-label="Pages">
          <ul>
            {PAGES.map((p) => (
              <li key={p.path}>
                <a href={`#/${p.path}`} aria-current={p === page ? 'page' : undefined}>
                  {p.title}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        {props.signedIn && (
          <button type="button" class="quiet" onClick={props.onSignOut}>
            Sign out
          </button>
        )}
      </header>
      <main id="main" tabIndex={-1}>
        {page.path === 'endpoints' && (
          <EndpointsPage client={props.client} token={props.token} onUnauthorized={props.onUnauthorized} />
        )}
        {page.path === 'transfers' &&
          (route[1] ? (
            // Keyed by id: another transfer is another page, with nothing of the last one's record or actions.
            <TransferDetail
              key={route[1]}
              client={props.client}
              id={route[1]}
              onUnauthorized={props.onUnauthorized}
            />
          ) : (
            <TransfersPage client={props.client} onUnauthorized={props.onUnauthorized} />
          ))}
        {page.path === 'nodes' && <NodesPage client={props.client} onUnauthorized={props.onUnauthorized} />}
      </main>
    </>
  );
}
