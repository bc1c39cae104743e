import type { SluiceClient } from '@sluice/client';
import { useEffect } from 'preact/hooks';
import { ago, when } from '../format.js';
import { usePolling } from '../hooks.js';
import { PollStatus, staleMarks } from '../poll-status.js';
import { isUnauthorized, messageOf } from '../session.js';

/** Members come from the shared store (every node heartbeats there): polled, as for transfers. */
const POLL_MS = 5_000;

export function NodesPage(props: { client: SluiceClient; onUnauthorized: () => void }) {
  const nodes = usePolling((signal) => props.client.control.nodes({ signal }), POLL_MS, [props.client]);
  useEffect(() => {
    if (isUnauthorized(nodes.error)) props.onUnauthorized();
  }, [nodes.error, props.onUnauthorized]);
  const list = nodes.data ?? [];
  const alive = list.filter((n) => n.alive).length;
  return (
    <>
      <div class="page-head">
        <h1>Nodes</h1>
        <PollStatus
          polled={nodes}
          everyMs={POLL_MS}
          summary={nodes.data && `${alive} of ${list.length} alive`}
        />
      </div>
      {nodes.error !== null && !isUnauthorized(nodes.error) && (
        <p role="alert" class="error">
          {messageOf(nodes.error)}
        </p>
      )}
      <table aria-label="Cluster members" {...staleMarks(nodes)}>
        <thead>
          <tr>
            <th scope="col">Node</th>
            <th scope="col">Status</th>
            <th scope="col">Address</th>
            <th scope="col">Last seen</th>
            <th scope="col">Started</th>
            <th scope="col">Instance</th>
          </tr>
        </thead>
        <tbody>
          {list.map((node) => (
            <tr key={`${node.nodeId}-${node.instanceId}`} data-node={node.nodeId}>
              <td>{node.nodeId}</td>
              <td>
                <span class={`state ${node.alive ? 'state-alive' : 'state-dead'}`}>
                  {node.alive ? 'alive' : 'dead'}
                </span>
              </td>
              <td>
                <code>{node.address}</code>
              </td>
              <td>
                <time dateTime={node.lastSeenAt} title={when(node.lastSeenAt)}>
                  {ago(node.lastSeenAt)}
                </time>
              </td>
              <td>{when(node.startedAt)}</td>
              <td>
                <code>{node.instanceId.slice(0, 8)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
