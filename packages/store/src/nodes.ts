/**
 * The `nodes` table: which app-server instances exist and when each was last seen, on the store's clock
 * (store-clock.ts), so `silentMs` compares one clock whatever node wrote the row.
 */
import { NameSchema, type NodeInfo, NotFoundError, parseOrThrow, ValidationError } from '@sluice/core';
import type { Kysely } from 'kysely';
import { rowToNode } from './record.js';
import type { StoreDatabase } from './schema.js';
import type { StoreClock } from './store-clock.js';
import { validDate, validOwner } from './validate.js';

/** What a node registers: its identity, and when it started (default: now). */
export type NodeRegistration = Omit<NodeInfo, 'lastSeenAt' | 'startedAt' | 'silentMs'> & { startedAt?: Date };

/**
 * Reads and writes node rows. `nowMs` is the node's clock, used only where the store has no clock of its own
 * (SQLite); the caller runs each call through its operation guard.
 *
 * @example
 * ```ts
 * const nodes = new NodeTable(db, storeClock('sqlite'));
 * await nodes.register({ nodeId: 'n1', address: 'http://n1:7070', instanceId: 'i-1' }, Date.now());
 * const [n1] = await nodes.list(Date.now()); // { nodeId: 'n1', …, silentMs: 0 }
 * ```
 */
export class NodeTable {
  readonly #db: Kysely<StoreDatabase>;
  readonly #clock: StoreClock;

  constructor(db: Kysely<StoreDatabase>, clock: StoreClock) {
    this.#db = db;
    this.#clock = clock;
  }

  /** Inserts the node, or replaces its identity and times when it registered before. */
  async register(node: NodeRegistration, nowMs: number): Promise<void> {
    if (typeof node !== 'object' || node === null) {
      throw new ValidationError('Invalid node: expected an object', [
        { path: '(root)', message: 'expected an object' },
      ]);
    }
    const identity = validOwner(node, 'node');
    const startedAt =
      node.startedAt === undefined ? nowMs : validDate(node.startedAt, 'node.startedAt').getTime();
    const row = {
      node_id: identity.nodeId,
      address: identity.address,
      instance_id: identity.instanceId,
      started_at: node.startedAt === undefined ? this.#clock.nowFor(nowMs) : startedAt,
      last_seen_at: this.#clock.nowFor(nowMs),
    };
    await this.#db
      .insertInto('nodes')
      .values(row)
      .onConflict((oc) =>
        oc.column('node_id').doUpdateSet({
          address: row.address,
          instance_id: row.instance_id,
          started_at: row.started_at,
          last_seen_at: row.last_seen_at,
        }),
      )
      .execute();
  }

  /** Marks a registered node seen now; `NOT_FOUND` for one that never registered. */
  async touch(nodeId: string, nowMs: number): Promise<void> {
    const id = parseOrThrow(NameSchema, nodeId, 'Invalid node id');
    const result = await this.#db
      .updateTable('nodes')
      .set({ last_seen_at: this.#clock.nowFor(nowMs) })
      .where('node_id', '=', id)
      .executeTakeFirst();
    if (result.numUpdatedRows === 0n) throw new NotFoundError(`Node "${id}" is not registered`);
  }

  /** Every node by id, with how long each has been silent on the store's clock. */
  async list(nowMs: number): Promise<NodeInfo[]> {
    const rows = await this.#db
      .selectFrom('nodes')
      .selectAll()
      .select(this.#clock.nowFor(nowMs).as('store_now'))
      .orderBy('node_id')
      .execute();
    return rows.map((row) => rowToNode(row, Number(row.store_now)));
  }
}
