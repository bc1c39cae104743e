import { useState } from 'preact/hooks';

/** The only thing shown while control auth is on and no accepted token is known. */
export function TokenPrompt(props: { refused: boolean; onSubmit: (token: string) => void }) {
  const [token, setToken] = useState('');
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
          aria-describedby={props.refused ? 'token-refused' : undefined}
        />
        {props.refused && (
          <p id="token-refused" role="alert" class="error">
            The control API refused that token (401 UNAUTHORIZED).
          </p>
        )}
        <button type="submit" class="sign-in">
          Sign in
        </button>
      </form>
    </main>
  );
}
