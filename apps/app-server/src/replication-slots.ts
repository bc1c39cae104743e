import {
  type Logger,
  postgresCapture,
  type SluiceConfig,
  SluiceError,
  SourceError,
  UnknownConnectionError,
  UnknownSlotError,
} from '@sluice/core';
import {
  defaultReplicationName,
  dropReplicationSlot,
  endpointSlotNames,
  listReplicationSlots,
  type OwnedSlotMark,
  type ReplicationSlotInfo,
} from '@sluice/pipeline';

/**
 * What a slot is to this node: `in-use` (a configured endpoint of this node reads it), `orphaned` (this node
 * created it for an endpoint that is no longer configured: it only holds WAL), `transfer` (created by a
 * transfer, on any node: named from the transfer id, dropped once the transfer is recorded finished), `other-node` (another node id created it), `foreign` (not
 * created by Sluice: never dropped by Sluice).
 */
export const SlotUse = {
  inUse: 'in-use',
  orphaned: 'orphaned',
  transfer: 'transfer',
  otherNode: 'other-node',
  foreign: 'foreign',
} as const;
export type SlotUse = (typeof SlotUse)[keyof typeof SlotUse];

/** One slot as `sluice-app-server slots list` shows it. */
export interface SlotRow extends ReplicationSlotInfo {
  /** The configured connection it was found through. */
  connection: string;
  /** The endpoint it belongs to (configured, or named by its ownership mark), or null. */
  endpoint: string | null;
  use: SlotUse;
}

/** The slots of every configured PostgreSQL connection, and the connections that could not be asked. */
export interface SlotListing {
  slots: SlotRow[];
  unreachable: Array<{ connection: string; message: string }>;
}

const SOURCE_SUFFIX = '.source';

/** The endpoint a source handle belongs to (`items.source` → `items`). */
function endpointOfHandle(handle: string): string | null {
  return handle.endsWith(SOURCE_SUFFIX) ? handle.slice(0, -SOURCE_SUFFIX.length) : null;
}

/**
 * Slot name → endpoint, for every endpoint of `config` that reads logical replication: its configured slot, else
 * both names its generations' slots take (the serving one and a green are fed at once, each by its own slot).
 */
export function configuredSlots(config: SluiceConfig): Map<string, string> {
  const slots = new Map<string, string>();
  for (const endpoint of config.endpoints) {
    const source = endpoint.source;
    if (source.type !== 'postgres' || postgresCapture(source, 'endpoint') !== 'replication') continue;
    if (source.slot !== undefined) {
      slots.set(source.slot, endpoint.name);
      continue;
    }
    const { primary, alternate } = endpointSlotNames(config.node.id, `${endpoint.name}${SOURCE_SUFFIX}`);
    slots.set(primary, endpoint.name);
    slots.set(alternate, endpoint.name);
  }
  return slots;
}

function useOf(
  config: SluiceConfig,
  configured: Map<string, string>,
  slot: string,
  owner: OwnedSlotMark | null,
) {
  if (configured.has(slot)) return SlotUse.inUse;
  if (owner === null) return SlotUse.foreign;
  // A transfer's slot belongs to the transfer, not to the node that created it (any owner streams it).
  if (owner.role === 'transfer') return SlotUse.transfer;
  if (owner.node !== config.node.id) return SlotUse.otherNode;
  return SlotUse.orphaned;
}

/** Each configured PostgreSQL connection once per URL (two names for one database list its slots once). */
function postgresConnections(config: SluiceConfig, only?: string): Array<{ name: string; url: string }> {
  if (only !== undefined) {
    const connection = config.connections[only];
    if (connection?.type !== 'postgres') throw new UnknownConnectionError(only);
    return [{ name: only, url: connection.url }];
  }
  const seen = new Set<string>();
  const out: Array<{ name: string; url: string }> = [];
  for (const [name, connection] of Object.entries(config.connections)) {
    if (connection.type !== 'postgres' || seen.has(connection.url)) continue;
    seen.add(connection.url);
    out.push({ name, url: connection.url });
  }
  return out;
}

/**
 * Lists the logical replication slots of the databases of the configured PostgreSQL connections, each with
 * what it is to this node ({@link SlotUse}).
 *
 * @example
 * ```ts
 * const { slots } = await listSlots(config);
 * const orphans = slots.filter((s) => s.use === 'orphaned');
 * ```
 */
export async function listSlots(
  config: SluiceConfig,
  options: { connection?: string } = {},
): Promise<SlotListing> {
  const configured = configuredSlots(config);
  const listing: SlotListing = { slots: [], unreachable: [] };
  for (const { name, url } of postgresConnections(config, options.connection)) {
    let slots: ReplicationSlotInfo[];
    try {
      slots = await listReplicationSlots(url);
    } catch (err) {
      listing.unreachable.push({ connection: name, message: (err as Error).message });
      continue;
    }
    for (const slot of slots) {
      const endpoint =
        configured.get(slot.slot) ??
        (slot.owner?.role === 'endpoint' ? endpointOfHandle(slot.owner.handle) : null);
      listing.slots.push({
        ...slot,
        connection: name,
        endpoint,
        use: useOf(config, configured, slot.slot, slot.owner),
      });
    }
  }
  return listing;
}

/** What `slots drop` should drop: one slot by name, the slot(s) of one endpoint, or every orphaned slot. */
export type SlotTarget =
  | { kind: 'slot'; slot: string }
  | { kind: 'endpoint'; endpoint: string }
  | { kind: 'orphaned' };

/** A slot that was dropped, with the publication dropped beside it. */
export interface DroppedSlot {
  connection: string;
  slot: string;
  publication: string;
  endpoint: string | null;
}

/**
 * Drops replication slots Sluice created (and their publications). A named slot that does not exist is
 * `UNKNOWN_SLOT`, one a walsender streams `SLOT_ACTIVE`, one Sluice did not create `SLOT_NOT_OWNED` — nothing is
 * dropped then. `orphaned` drops this node's slots of endpoints no longer configured (none is not an error).
 *
 * @example
 * ```ts
 * await dropSlots(config, { kind: 'endpoint', endpoint: 'items' });
 * ```
 */
export async function dropSlots(
  config: SluiceConfig,
  target: SlotTarget,
  options: { connection?: string } = {},
): Promise<DroppedSlot[]> {
  const listing = await listSlots(config, options);
  const chosen = listing.slots.filter((s) =>
    target.kind === 'slot'
      ? s.slot === target.slot
      : target.kind === 'endpoint'
        ? s.endpoint === target.endpoint && (s.use === SlotUse.inUse || s.use === SlotUse.orphaned)
        : s.use === SlotUse.orphaned,
  );
  if (chosen.length === 0 && target.kind !== 'orphaned') {
    const missing =
      target.kind === 'slot'
        ? target.slot
        : ([...configuredSlots(config)].find(([, e]) => e === target.endpoint)?.[0] ??
          defaultReplicationName(config.node.id, `${target.endpoint}${SOURCE_SUFFIX}`));
    const unreachable = listing.unreachable[0];
    if (unreachable !== undefined)
      throw new SourceError(
        `Replication slot ${missing} not found, and connection ${unreachable.connection} could not be asked: ${unreachable.message}`,
      );
    throw new UnknownSlotError(missing);
  }
  const dropped: DroppedSlot[] = [];
  for (const slot of chosen) {
    const url = (config.connections[slot.connection] as { url: string }).url;
    const mark = await dropReplicationSlot(url, slot.slot);
    dropped.push({
      connection: slot.connection,
      slot: slot.slot,
      publication: mark.publication,
      endpoint: slot.endpoint,
    });
  }
  return dropped;
}

/**
 * On start-up: drops the slots this node created for endpoints that are no longer in its configuration, so a
 * removed endpoint never keeps WAL until the disk fills. Slots Sluice did not create, other nodes' slots and
 * transfers' slots are left alone. A slot still held by a walsender (the previous process just died) is retried
 * for `activeWaitMs`; failures are logged, never fatal.
 */
export async function dropRemovedEndpointSlots(
  config: SluiceConfig,
  logger: Logger,
  options: { activeWaitMs?: number; signal?: AbortSignal } = {},
): Promise<DroppedSlot[]> {
  const deadline = Date.now() + (options.activeWaitMs ?? 15_000);
  const dropped: DroppedSlot[] = [];
  for (;;) {
    if (options.signal?.aborted) return dropped;
    const listing = await listSlots(config);
    for (const { connection, message } of listing.unreachable)
      logger.warn({ connection, err: message }, 'cannot look for replication slots of removed endpoints');
    let waiting = false;
    for (const slot of listing.slots.filter((s) => s.use === SlotUse.orphaned)) {
      const url = (config.connections[slot.connection] as { url: string }).url;
      try {
        const mark = await dropReplicationSlot(url, slot.slot);
        const done = {
          connection: slot.connection,
          slot: slot.slot,
          publication: mark.publication,
          endpoint: slot.endpoint,
        };
        dropped.push(done);
        logger.info(done, 'dropped the replication slot of an endpoint removed from the configuration');
      } catch (err) {
        if (SluiceError.hasCode(err, 'SLOT_ACTIVE') && Date.now() < deadline) waiting = true;
        else
          logger.warn(
            { slot: slot.slot, connection: slot.connection, err },
            'cannot drop the replication slot of a removed endpoint',
          );
      }
    }
    if (!waiting) return dropped;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
