import type { SluiceClient, TransferView } from '@sluice/client';
import { useEffect, useState } from 'preact/hooks';
import { ConfirmButton } from '../confirm.js';
import { ago, count, when } from '../format.js';
import { useAction, usePolling } from '../hooks.js';
import { PollStatus, staleMarks } from '../poll-status.js';
import { isUnauthorized, messageOf } from '../session.js';
import { Outcome } from './endpoints.js';

const STATES = ['RECEIVED', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'TERMINATED'] as const;
type State = (typeof STATES)[number];
const PAGE_SIZE = 20;
/**
 * Transfers are polled, not streamed: their records live in the shared store and change on whichever node runs
 * them, so a node-local stream would see only its own; a page of the store every 2 s is what every node can answer.
 */
const POLL_MS = 2_000;

const ACTIVE: ReadonlySet<string> = new Set(['RECEIVED', 'IN_PROGRESS']);

function useUnauthorizedGuard(error: unknown, onUnauthorized: () => void) {
  useEffect(() => {
    if (isUnauthorized(error)) onUnauthorized();
  }, [error, onUnauthorized]);
}

/**
 * The finishing mark (`finishing: true`): the owner passed its fenced finishing step and publishes what cannot be
 * taken back, so a terminate or takeover waits for its lease (docs/fencing.md). Shown beside the state, which is
 * still IN_PROGRESS.
 */
function FinishingMark(props: { transfer: TransferView }) {
  return props.transfer.finishing ? (
    <span
      class="state state-finishing"
      data-fact="finishing"
      title="The owner passed its fenced finishing step and is publishing: a terminate or takeover waits for its lease"
    >
      finishing
    </span>
  ) : null;
}

function progressOf(transfer: TransferView): string {
  if (transfer.progress)
    return `${count(transfer.progress.recordsWritten)} written, ${count(Math.round(transfer.progress.rate))}/s`;
  if (transfer.result) return 'done';
  return ACTIVE.has(transfer.state) ? (transfer.owner ? `on ${transfer.owner.nodeId}` : 'waiting') : '—';
}

function resultOf(transfer: TransferView): string {
  if (transfer.result)
    return `${count(transfer.result.recordsRead)} read, ${count(transfer.result.recordsWritten)} written${transfer.result.badRecords ? `, ${count(transfer.result.badRecords)} bad` : ''}`;
  if (transfer.error) return transfer.error.code;
  return '—';
}

export function TransfersPage(props: { client: SluiceClient; onUnauthorized: () => void }) {
  const [state, setState] = useState<State | ''>('');
  const [owner, setOwner] = useState('');
  // The cursors of the pages before this one (Previous pops one).
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const page = usePolling(
    (signal) =>
      props.client.transfers.list({
        limit: PAGE_SIZE,
        signal,
        ...(state ? { state } : {}),
        ...(owner.trim() ? { owner: owner.trim() } : {}),
        ...(cursor ? { cursor } : {}),
      }),
    POLL_MS,
    [props.client, state, owner, cursor],
  );
  useUnauthorizedGuard(page.error, props.onUnauthorized);
  const records = page.data?.records ?? [];
  return (
    <>
      <div class="page-head">
        <h1>Transfers</h1>
        <PollStatus polled={page} everyMs={POLL_MS} />
      </div>
      <form class="filters" onSubmit={(event) => event.preventDefault()}>
        <label>
          State
          <select
            name="state"
            value={state}
            onChange={(event) => {
              setState((event.target as HTMLSelectElement).value as State | '');
              setCursors([]);
            }}
          >
            <option value="">All states</option>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Owner node
          <input
            name="owner"
            type="text"
            placeholder="any"
            value={owner}
            onChange={(event) => {
              setOwner((event.target as HTMLInputElement).value);
              setCursors([]);
            }}
          />
        </label>
      </form>
      {page.error !== null && !isUnauthorized(page.error) && (
        <p role="alert" class="error">
          {messageOf(page.error)}
        </p>
      )}
      <table aria-label="Transfers" {...staleMarks(page)}>
        <thead>
          <tr>
            <th scope="col">Id</th>
            <th scope="col">State</th>
            <th scope="col">Owner</th>
            <th scope="col" class="num">
              Epoch
            </th>
            <th scope="col" class="num">
              Attempts
            </th>
            <th scope="col">Progress</th>
            <th scope="col">Result</th>
            <th scope="col">Updated</th>
          </tr>
        </thead>
        <tbody>
          {records.map((t) => (
            <tr key={t.id} data-transfer={t.id}>
              <td>
                <a href={`#/transfers/${encodeURIComponent(t.id)}`}>{t.id}</a>
              </td>
              <td>
                <span class={`state state-${t.state}`}>{t.state}</span> <FinishingMark transfer={t} />
              </td>
              <td>{t.owner?.nodeId ?? '—'}</td>
              <td class="num">{t.epoch}</td>
              <td class="num">{t.attempts}</td>
              <td>{progressOf(t)}</td>
              <td>{resultOf(t)}</td>
              <td>
                <time dateTime={t.updatedAt} title={when(t.updatedAt)}>
                  {ago(t.updatedAt)}
                </time>
              </td>
            </tr>
          ))}
          {page.data && records.length === 0 && (
            <tr>
              <td colSpan={8}>No transfers{state ? ` in state ${state}` : ''}.</td>
            </tr>
          )}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages of transfers">
        <button
          type="button"
          disabled={cursors.length === 0}
          onClick={() => setCursors(cursors.slice(0, -1))}
        >
          Previous page
        </button>
        <span>Page {cursors.length + 1}</span>
        <button
          type="button"
          disabled={!page.data?.next}
          onClick={() => page.data?.next && setCursors([...cursors, page.data.next])}
        >
          Next page
        </button>
      </nav>
    </>
  );
}

export function TransferDetail(props: { client: SluiceClient; id: string; onUnauthorized: () => void }) {
  const transfer = usePolling((signal) => props.client.transfers.get(props.id, { signal }), POLL_MS, [
    props.client,
    props.id,
  ]);
  useUnauthorizedGuard(transfer.error, props.onUnauthorized);
  const action = useAction(props.onUnauthorized);
  const t = transfer.data;
  return (
    <>
      <p>
        <a href="#/transfers">← All transfers</a>
      </p>
      <h1>
        Transfer <code>{props.id}</code>
      </h1>
      <PollStatus polled={transfer} everyMs={POLL_MS} />
      {transfer.error !== null && !isUnauthorized(transfer.error) && (
        <p role="alert" class="error">
          {messageOf(transfer.error)}
        </p>
      )}
      {t && (
        <>
          <dl {...staleMarks(transfer, 'facts')}>
            <div>
              <dt>State</dt>
              <dd>
                <span class={`state state-${t.state}`} data-fact="state">
                  {t.state}
                </span>{' '}
                <FinishingMark transfer={t} />
                {t.finishing && (
                  <p class="muted">
                    Publishing: the owner passed its fenced finishing step. A terminate waits for its lease to
                    expire; the record turns final once it has published.
                  </p>
                )}
              </dd>
            </div>
            <div>
              <dt>Mode</dt>
              <dd>{t.mode}</dd>
            </div>
            <div>
              <dt>Owner</dt>
              <dd>{t.owner ? `${t.owner.nodeId} (${t.owner.address ?? 'no address'})` : '—'}</dd>
            </div>
            <div>
              <dt>Epoch / attempts / retries</dt>
              <dd>
                {t.epoch} / {t.attempts} / {t.retries}
              </dd>
            </div>
            <div>
              <dt>Progress</dt>
              <dd>{progressOf(t)}</dd>
            </div>
            <div>
              <dt>Result</dt>
              <dd>{resultOf(t)}</dd>
            </div>
            <div>
              <dt>Created</dt>
              <dd>{when(t.createdAt)}</dd>
            </div>
            <div>
              <dt>Updated</dt>
              <dd>{when(t.updatedAt)}</dd>
            </div>
            <div>
              <dt>Lease expires</dt>
              <dd>{when(t.leaseExpiresAt)}</dd>
            </div>
          </dl>
          {ACTIVE.has(t.state) && (
            <p>
              <ConfirmButton
                class="danger"
                label="Terminate"
                question={`Terminate ${t.id}? Its work stops for good.`}
                confirmLabel={`Yes, terminate ${t.id}`}
                // Offered from a record read now: a stale one may be past what can be terminated, or reach no server.
                disabled={action.busy !== null || transfer.stale}
                onConfirm={() =>
                  void action.run('Terminate', async () => {
                    const after = await props.client.transfers.terminate(t.id);
                    transfer.refresh();
                    return `Terminate sent: the transfer is ${after.state}.`;
                  })
                }
              />
            </p>
          )}
          <Outcome outcome={action.outcome} busy={action.busy} />
          <section aria-labelledby="request-heading">
            <h2 id="request-heading">Request</h2>
            <pre>{JSON.stringify(t.request, null, 2)}</pre>
          </section>
          {t.error && (
            <section aria-labelledby="error-heading">
              <h2 id="error-heading">Error</h2>
              <pre class="error">{JSON.stringify(t.error, null, 2)}</pre>
            </section>
          )}
        </>
      )}
    </>
  );
}
