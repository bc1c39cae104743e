import type {
  ConnectionLoss,
  EndpointWatchView,
  GenerationView,
  LagUnit,
  RetryView,
  ServingFollowerPhase,
  ServingFollowerStatus,
  SlotWaitView,
  SluiceClient,
  SwitchView,
} from '@sluice/client';
import { useEffect, useState } from 'preact/hooks';
import { ConfirmButton } from '../confirm.js';
import { ago, count, percent, shortGeneration, until, when } from '../format.js';
import { type ActionOutcome, useAction, useNow } from '../hooks.js';
import { clientFor, isUnauthorized, messageOf } from '../session.js';

type StreamState = {
  endpoints: EndpointWatchView[] | null;
  live: boolean;
  error: string | null;
};

/** The endpoint stream's heartbeat interval the page asks for; three silent intervals end the connection. */
const STREAM_HEARTBEAT_MS = 3_000;

/** What the status line says while the stream reconnects after losing its connection. */
const LOST: Record<ConnectionLoss, string> = {
  unreachable: 'the app-server does not answer; reconnecting…',
  refused: 'the app-server refused the endpoint stream; reconnecting…',
  closed: 'the connection to the app-server was lost; reconnecting…',
};

/** The status line's words for a lost stream; a refusal in the server's words (its code and what was reached). */
function lostText(why: ConnectionLoss, refusal: unknown): string {
  return why === 'refused' && refusal
    ? `the app-server refused the endpoint stream — ${messageOf(refusal)}; reconnecting…`
    : LOST[why];
}

/**
 * The endpoint stream (`GET /v1/endpoints/stream`): live, reconnecting by itself; no polling. Live only while a
 * connection is open: the picture it last sent stays on the page, marked stale, until the next connection sends a
 * new one.
 */
function useEndpointStream(token: string | undefined, onUnauthorized: () => void): StreamState {
  const [state, setState] = useState<StreamState>({ endpoints: null, live: false, error: null });
  useEffect(() => {
    const controller = new AbortController();
    const client = clientFor(token);
    void (async () => {
      try {
        for await (const event of client.control.watchEndpoints({
          signal: controller.signal,
          backoff: { initialMs: 250, maxMs: 5_000 },
          // A heartbeat every 3 s, so a connection silent for 9 s is taken for dead: a frozen app-server (or a path
          // lost without a reset) is said "Not live" within seconds, as the polled pages say it, not after the
          // default 45 s during which the page would offer actions that reach nothing.
          heartbeatMs: STREAM_HEARTBEAT_MS,
          onOpen: () => setState((s) => ({ ...s, live: true, error: null })),
          // Between a lost connection and the next one the picture on the page is stale: say so — and, for a
          // refusal, why in the server's words (429 QUEUE_FULL names the bound: the operator may close a tab).
          onConnectionLost: (why, refusal) =>
            setState((s) => ({ ...s, live: false, error: lostText(why, refusal) })),
        })) {
          if (event.type === 'endpoints') setState({ endpoints: event.endpoints, live: true, error: null });
        }
      } catch (err) {
        if (controller.signal.aborted) return;
        if (isUnauthorized(err)) onUnauthorized();
        else setState((s) => ({ ...s, live: false, error: messageOf(err) }));
      }
    })();
    return () => controller.abort();
  }, [token, onUnauthorized]);
  return state;
}

export function EndpointsPage(props: {
  client: SluiceClient;
  token: string | undefined;
  onUnauthorized: () => void;
}) {
  const stream = useEndpointStream(props.token, props.onUnauthorized);
  return (
    <>
      <div class="page-head">
        <h1>Endpoints</h1>
        <p class={stream.live ? 'live' : 'stale'} role="status">
          {stream.live ? 'Live' : stream.error ? `Not live: ${stream.error}` : 'Connecting…'}
        </p>
      </div>
      {stream.endpoints === null ? (
        <p>Loading…</p>
      ) : stream.endpoints.length === 0 ? (
        <p>This host has no endpoints (see endpoints: in sluice.yaml).</p>
      ) : (
        stream.endpoints.map((endpoint) => (
          <EndpointCard
            key={endpoint.name}
            client={props.client}
            endpoint={endpoint}
            live={stream.live}
            onUnauthorized={props.onUnauthorized}
          />
        ))
      )}
    </>
  );
}

function EndpointCard(props: {
  client: SluiceClient;
  endpoint: EndpointWatchView;
  live: boolean;
  onUnauthorized: () => void;
}) {
  const { endpoint } = props;
  const control = props.client.control;
  const action = useAction(props.onUnauthorized);
  // Actions are offered from the picture: a stale one may offer what no longer applies (or reaches no server).
  const idle = action.busy === null && props.live;
  const id = `endpoint-${endpoint.name}`;
  const held = endpoint.generations.filter((g) => g.state === 'held');
  const short = (name: string | null | undefined) => shortGeneration(name, endpoint.name);
  const rollbackTarget = rollbackTargetOf(endpoint);
  return (
    <article
      class={props.live ? 'card' : 'card stale'}
      aria-labelledby={id}
      data-endpoint={endpoint.name}
      aria-busy={props.live ? undefined : 'true'}
    >
      <header class="card-head">
        <h2 id={id}>{endpoint.name}</h2>
        <span class={`phase phase-${endpoint.phase}`}>{endpoint.phase}</span>
        <button
          type="button"
          disabled={!idle || endpoint.building !== null}
          onClick={() =>
            action.run('Rebuild', async () => {
              const started = await control.rebuild(endpoint.name);
              // A failed endpoint is started again rather than rebuilt (a refusal shows the API's error instead).
              return started.rebuild === 'restarted'
                ? `${endpoint.name} was started again.`
                : `Rebuild of ${endpoint.name} started: a new generation is built while ${short(endpoint.servingCache)} serves.`;
            })
          }
        >
          Rebuild
        </button>
      </header>
      <Outcome outcome={action.outcome} busy={action.busy} />
      <dl class="facts">
        <div>
          <dt>Alias → serving generation</dt>
          <dd>
            <code>{endpoint.alias}</code> →{' '}
            <code title={endpoint.servingCache ?? ''}>{endpoint.servingCache ?? '—'}</code>
          </dd>
        </div>
        <div>
          <dt>Records</dt>
          <dd data-fact="records">{count(endpoint.records)}</dd>
        </div>
        <div>
          <dt>Lag</dt>
          <dd data-fact="lag">
            {endpoint.replication?.lagBytes != null
              ? `${count(endpoint.replication.lagBytes)} bytes of WAL${endpoint.replication.lagSeconds != null ? `, ${endpoint.replication.lagSeconds.toFixed(1)} s` : ''}`
              : endpoint.lag === null
                ? '—'
                : sourceLag(endpoint.lag, endpoint.lagUnit)}
            {endpoint.replication?.lagBytes != null && endpoint.replication.observedAt && (
              <LagAge observedAt={endpoint.replication.observedAt} />
            )}
          </dd>
        </div>
        <div>
          <dt>Ingest rate</dt>
          {/* Clamped: the pipeline's window may straddle a restart of its counters (a rebuild). */}
          <dd>{count(Math.max(0, Math.round(endpoint.rate)))} records/s</dd>
        </div>
        <div class="wide">
          <dt>Last decision</dt>
          <dd>
            {endpoint.decision ? (
              <>
                <strong>{endpoint.decision.decision}</strong> — {endpoint.decision.reason}
              </>
            ) : (
              '—'
            )}
          </dd>
        </div>
        <div>
          <dt>Skipped records</dt>
          <dd data-fact="bad-records" class={endpoint.badRecords.count > 0 ? 'warning' : undefined}>
            {count(endpoint.badRecords.count)}
          </dd>
        </div>
        {endpoint.badRecords.last && (
          // Rows the schema refused are dropped while the endpoint streams on: say so, or it looks healthy.
          <div class="wide">
            <dt>Last skipped record</dt>
            <dd class="warning" data-fact="bad-record-reason">
              {endpoint.badRecords.last.reason}{' '}
              <span class="muted">
                ({endpoint.badRecords.last.source}, {when(endpoint.badRecords.last.at)})
              </span>
            </dd>
          </div>
        )}
        {endpoint.slotWait && <SlotWaitFact wait={endpoint.slotWait} />}
        {endpoint.follower && (
          <FollowerFact follower={endpoint.follower} fed={endpoint.held?.cache ?? endpoint.buildingCache} />
        )}
        {endpoint.follower?.slotWait && (
          <SlotWaitFact
            wait={endpoint.follower.slotWait}
            label="Serving generation's slot"
            fact="follower-slot-wait"
          />
        )}
        {endpoint.phase === 'retrying' && endpoint.error ? (
          <RetryFact error={endpoint.error} retry={endpoint.retry} />
        ) : (
          endpoint.error && (
            <div class="wide">
              <dt>Error</dt>
              <dd class="error" data-fact="error">
                {endpoint.error.code}: {endpoint.error.message}
                {endpoint.phase === 'failed' && ' — fix the cause, then Rebuild'}
              </dd>
            </div>
          )
        )}
      </dl>

      {endpoint.building && (
        <section class="building" aria-label="Building generation">
          <h3>
            Building <code>{endpoint.building.cache}</code>
          </h3>
          <label for={`${id}-progress`}>
            {endpoint.building.expected === null
              ? `${count(endpoint.building.records)} records so far`
              : `${count(endpoint.building.records)} / ${count(endpoint.building.expected)} records (${percent(endpoint.building.ratio ?? 0)})`}
          </label>
          {endpoint.building.ratio === null ? (
            <progress id={`${id}-progress`} aria-label={`Build progress of ${endpoint.building.cache}`} />
          ) : (
            <progress
              id={`${id}-progress`}
              max={1}
              value={endpoint.building.ratio}
              aria-label={`Build progress of ${endpoint.building.cache}`}
            />
          )}
        </section>
      )}

      {held.length > 0 && (
        <section class="held" aria-label="Held generations">
          <h3>Held</h3>
          <ul class="held-list">
            {held.map((generation) => (
              <li key={generation.name}>
                <code>{generation.name}</code>: {count(generation.records)} records, held because{' '}
                <em>{generation.reason ?? 'the switch is manual'}</em>{' '}
                <ConfirmButton
                  label={`Promote ${short(generation.name)}`}
                  question={`Serve ${short(generation.name)} instead of ${short(endpoint.servingCache)}?`}
                  confirmLabel={`Yes, promote ${short(generation.name)}`}
                  disabled={!idle}
                  onConfirm={() =>
                    void action.run('Promote', async () => {
                      const moved = await control.promote(endpoint.name, { generation: generation.name });
                      return moved.changed
                        ? `Promoted: ${endpoint.name} now serves ${short(moved.to)} (was ${short(moved.from)}).`
                        : `${short(moved.to)} was already promoted.`;
                    })
                  }
                />
              </li>
            ))}
          </ul>
        </section>
      )}

      <div class="columns">
        <section aria-labelledby={`${id}-timeline`}>
          <h3 id={`${id}-timeline`}>Switch timeline</h3>
          <Timeline
            endpoint={endpoint.name}
            history={endpoint.history}
            rollbackTarget={rollbackTarget}
            disabled={!idle}
            onRollback={(to, from) =>
              void action.run('Roll back', async () => {
                // What the operator confirmed: from the generation shown serving to the one named. The page may be
                // behind the server (another operator switched meanwhile): then it is refused, and nothing moves.
                const moved = await control.rollback(endpoint.name, { to, from });
                return moved.changed
                  ? `Rolled back: ${endpoint.name} serves ${short(moved.to)} again (was ${short(moved.from)}).`
                  : `${endpoint.name} was already rolled back to ${short(moved.to)}.`;
              })
            }
          />
        </section>
        <section aria-labelledby={`${id}-generations`}>
          <h3 id={`${id}-generations`}>Generations</h3>
          <Generations endpoint={endpoint.name} generations={endpoint.generations} />
        </section>
      </div>
    </article>
  );
}

/** What a source's own lag counts (`lagUnit`: its file's bytes, its stream's messages), as the card says it. */
const LAG_UNIT: Record<LagUnit, { one: string; many: string; of: string }> = {
  bytes: { one: 'byte', many: 'bytes', of: 'of its file not yet read' },
  messages: { one: 'message', many: 'messages', of: 'of its stream not yet read' },
};

/** "1,024 bytes of its file not yet read": a file's or a stream's lag with its unit; a bare count for no unit. */
function sourceLag(lag: number, unit: LagUnit | null): string {
  if (unit === null) return count(lag);
  const said = LAG_UNIT[unit];
  return `${count(lag)} ${lag === 1 ? said.one : said.many} ${said.of}`;
}

/**
 * The run waits for its replication slot, which another process streams (`slotWait`: a walsender not released yet,
 * `pg_recvlogical`, an app-server with the same node id): nothing streams meanwhile, and the operator may have to end
 * the holder — so say which slot, which PostgreSQL backend holds it, since when, and when the wait gives up (to be
 * retried).
 */
function SlotWaitFact(props: { wait: SlotWaitView; label?: string; fact?: string }) {
  const { wait } = props;
  return (
    <div class="wide">
      <dt>{props.label ?? 'Replication slot'}</dt>
      <dd data-fact={props.fact ?? 'slot-wait'} class="warning">
        waiting for slot <code>{wait.slot}</code>, held by{' '}
        {wait.activePid === null ? 'another process' : `PostgreSQL backend ${wait.activePid}`}, since{' '}
        <time dateTime={wait.since}>{when(wait.since)}</time>, gives up at{' '}
        <time dateTime={wait.until}>{when(wait.until)}</time>{' '}
        <span class="muted">(then it is retried by itself)</span>
      </dd>
    </div>
  );
}

/** Replication figures older than this are said to be: while PostgreSQL answers they are read every second. */
const STALE_LAG_MS = 5_000;

/**
 * How old the replication figures are once they are not live (`replication.observedAt`, set while the endpoint
 * retries: when PostgreSQL's WAL position was last read — long ago while PostgreSQL is down): "as of N s ago",
 * counted on by the page itself, so that a lag frozen by an outage is not read as a live one. The same age as the
 * gauge `sluice_replication_lag_age_seconds`. Nothing while they are fresh.
 */
function LagAge(props: { observedAt: string }) {
  const now = useNow(true);
  const ageMs = now - Date.parse(props.observedAt);
  if (!(ageMs > STALE_LAG_MS)) return null;
  return (
    <>
      {' '}
      <span class="warning" data-fact="lag-age">
        as of {ago(props.observedAt, now)} (last read from PostgreSQL at {when(props.observedAt)})
      </span>
    </>
  );
}

/**
 * An endpoint that retries by itself (`phase: retrying`: its source unreachable, PostgreSQL restarting): when it tries
 * again and why, counted down — an outage Sluice waits out, not an error asking the operator to act.
 */
function RetryFact(props: { error: { code: string; message: string }; retry: RetryView | null }) {
  return (
    <div class="wide">
      <dt>Recovering by itself</dt>
      <dd data-fact="retry" class="retrying">
        <RetryLine error={props.error} retry={props.retry} />
      </dd>
    </div>
  );
}

/**
 * "retrying in N s: CODE: message (n failed attempts so far; …)": one retry Sluice makes by itself — the endpoint's
 * start or run, or the serving generation's follower — counted down to its next attempt.
 */
function RetryLine(props: { error: { code: string; message: string }; retry: RetryView | null }) {
  const { error, retry } = props;
  const now = useNow(retry?.nextAttemptAt != null);
  const attempts = retry?.attempts ?? 0;
  return (
    <>
      retrying {until(retry?.nextAttemptAt, now)}: {error.code}: {error.message}{' '}
      <span class="muted">
        ({attempts} failed {attempts === 1 ? 'attempt' : 'attempts'} so far; it starts again by itself)
      </span>
    </>
  );
}

/** The badge colour of a follower's phase: the pipeline phases' (a standing serving generation is a warning). */
const FOLLOWER_BADGE: Record<ServingFollowerPhase, string> = {
  starting: 'phase-starting',
  following: 'phase-streaming',
  retrying: 'phase-retrying',
  standing: 'phase-held',
  paused: 'phase-starting',
};

/**
 * Whether the serving generation keeps following its source while another generation is fed (docs/generations.md):
 * a serving generation that stands or retries serves ever older rows, which the lag alone does not explain.
 */
function FollowerFact(props: { follower: ServingFollowerStatus; fed: string | null }) {
  const { follower } = props;
  const commit = follower.lastCommit;
  return (
    <div class="wide">
      <dt>Serving generation{props.fed ? ` while ${props.fed} is fed` : ''}</dt>
      <dd data-fact="follower" data-phase={follower.phase}>
        <span class={`phase ${FOLLOWER_BADGE[follower.phase]}`}>{follower.phase}</span>{' '}
        {follower.phase === 'following' && (
          <>
            follows its source through its own slot: {count(follower.recordsWritten)} records written
            {commit && (
              <span class="muted">
                {' '}
                (last commit <code>{commit.lsn}</code>, {when(commit.at)})
              </span>
            )}
          </>
        )}
        {follower.phase === 'starting' && 'about to follow its source from its own checkpoint…'}
        {follower.phase === 'retrying' && (
          // Said as the endpoint's own retry: when it tries again, and why.
          <span class="retrying">
            <RetryLine
              error={follower.error ?? { code: 'INTERNAL', message: follower.reason ?? 'its run failed' }}
              retry={follower.retry}
            />
          </span>
        )}
        {follower.phase === 'paused' && (
          <>
            paused at its last commit{commit ? ` (${commit.lsn})` : ''} while the alias is handed over:{' '}
            {follower.reason}
          </>
        )}
        {follower.phase === 'standing' && (
          <span class="warning">
            stands at its last commit{commit ? ` (${commit.lsn})` : ''} until the alias moves:{' '}
            {follower.reason}
          </span>
        )}
      </dd>
    </div>
  );
}

/**
 * Roll back is offered where the API would do it: the latest switch came from a generation that is still
 * retained (not garbage-collected). That includes a rollback: the page sends the generation it names (`to`), so
 * this is no repeat of it but the way back to the generation rolled back from — an operator who rolled back by
 * mistake has nothing held to promote. A logical-replication generation keeps its slot until it is collected
 * (docs/generations.md), so it can be continued too; where its source cannot resume it the API answers 409
 * `CANNOT_RESUME` and nothing changes.
 */
function rollbackTargetOf(endpoint: EndpointWatchView): string | null {
  const latest = endpoint.history[0];
  if (!latest || latest.from === null) return null;
  const previous = endpoint.generations.find((g) => g.name === latest.from);
  return previous && previous.state !== 'serving' ? previous.name : null;
}

function Timeline(props: {
  endpoint: string;
  history: SwitchView[];
  rollbackTarget: string | null;
  disabled: boolean;
  /** `to`: the generation offered; `from`: the one the latest switch shows serving. */
  onRollback: (to: string, from: string) => void;
}) {
  if (props.history.length === 0) return <p>No switch yet.</p>;
  const target = props.rollbackTarget;
  return (
    <ol class="timeline">
      {props.history.map((entry, i) => (
        <li key={`${entry.version}-${entry.at}`} data-cause={entry.cause}>
          <time dateTime={entry.at}>{when(entry.at)}</time>{' '}
          <span class={`cause cause-${entry.cause}`}>{entry.cause}</span>{' '}
          <span class="move">
            {entry.from ? <code>{shortGeneration(entry.from, props.endpoint)}</code> : 'nothing'} →{' '}
            <code>{shortGeneration(entry.to, props.endpoint)}</code>
          </span>
          {i === 0 && target && (
            <ConfirmButton
              class="secondary rollback"
              label={`Roll back to ${shortGeneration(target, props.endpoint)}`}
              question={`Serve ${shortGeneration(target, props.endpoint)} again instead of ${shortGeneration(entry.to, props.endpoint)}?`}
              confirmLabel={`Yes, roll back to ${shortGeneration(target, props.endpoint)}`}
              disabled={props.disabled}
              onConfirm={() => props.onRollback(target, entry.to)}
            />
          )}
        </li>
      ))}
    </ol>
  );
}

function Generations(props: { endpoint: string; generations: GenerationView[] }) {
  return (
    <table class="compact">
      <thead>
        <tr>
          <th scope="col">Generation</th>
          <th scope="col">State</th>
          <th scope="col" class="num">
            Records
          </th>
          <th scope="col">Created</th>
          <th scope="col">Why</th>
        </tr>
      </thead>
      <tbody>
        {props.generations.map((g) => (
          <tr key={g.name} data-state={g.state}>
            <td>
              <code title={g.name}>{shortGeneration(g.name, props.endpoint)}</code>
            </td>
            <td>
              <span class={`state state-${g.state}`}>{g.state}</span>
            </td>
            <td class="num">{count(g.records)}</td>
            <td>{when(g.createdAt)}</td>
            <td>{[g.cause, g.reason].filter(Boolean).join(': ') || '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function Outcome(props: { outcome: ActionOutcome; busy: string | null }) {
  return (
    <p class={`outcome ${props.outcome?.kind ?? ''}`} role="status" aria-live="polite">
      {props.busy ? `${props.busy}…` : (props.outcome?.text ?? '')}
    </p>
  );
}
