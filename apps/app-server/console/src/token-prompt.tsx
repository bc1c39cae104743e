import { useState } from 'preact/hooks';
import type { PromptReason } from './session.js';

/** What the prompt says about the last token, by why it shows (nothing when none was tried). */
const SAID: Record<PromptReason, string | null> = {
  asked: null,
  refused: 'The control API refused that token (401 UNAUTHORIZED).',
  expired:
    'The control API no longer accepts your token (401 UNAUTHORIZED): it expired or was revoked. Sign in with a current one.',
};

/** The only thing shown while control auth is on and no accepted token is known. */
export function TokenPrompt(props: { reason: PromptReason; onSubmit: (token: string) => void }) {
  const [token, setToken] = useState('');
  const said = SAID[props.reason];
  return (
    <main class="centered">
      <h1>Sluice console</h1>
      <form
        class="token"
        onSubmit={(event) => {
          event.preventDefault();
          if (token.trim() !== '') props.onSubmit(token.trim());
        }}
      >
        <p>This app-server's control API needs a token (control.auth). It is kept in this tab only.</p>
        <label for="token">Bearer token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          required
          value={token}
          onInput={(event) => setToken((event.target as HTMLInputElement).value)}
          aria-describedby={said ? 'token-refused' : undefined}
        />
        {said && (
          <p id="token-refused" role="alert" class="error">
            {said}
          </p>
        )}
        <button type="submit" class="sign-in">
          Sign in
        </button>
      </form>
    </main>
  );
}
