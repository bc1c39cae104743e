/**
 * The latest `AliasRedirected` per host and alias in a JetStream KV bucket (key `<host>.<alias>`, both encoded:
 * alias versions count per host, so two hosts' entries for one alias never replace each other), so a process that connects late (or missed
 * events while disconnected) can read the current state. Writes are compare-and-set on the entry's revision and
 * never replace a newer redirect with an older one, whatever order two publishers race in.
 */

import { jetstream } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { AliasRedirected, Logger } from '@sluice/core';
import { AliasRedirectedSchema } from '@sluice/core';
import { aliasEventKey, byHostAndAlias, isOlderAliasEvent } from '../shared/alias-latest.js';
import { kvKey } from '../shared/encoding.js';
import { decodeJson, logDropped } from '../shared/wire.js';

const WRITE_ATTEMPTS = 4;

/** The KV key of one host's alias (`.` separates the two encoded parts; neither encoding can contain it). */
function aliasKey(host: string, alias: string): string {
  return `${kvKey(host)}.${kvKey(alias)}`;
}

export class AliasStore {
  readonly #nc: NatsConnection;
  readonly #bucket: string;
  readonly #logger: Logger;
  readonly #maxBytes: number;
  readonly #timeoutMs: number;
  #kv: Promise<KV> | null = null;

  constructor(
    nc: NatsConnection,
    options: { bucket: string; logger: Logger; maxBytes: number; timeoutMs: number },
  ) {
    this.#nc = nc;
    this.#bucket = options.bucket;
    this.#logger = options.logger;
    this.#maxBytes = options.maxBytes;
    this.#timeoutMs = options.timeoutMs;
  }

  get bucket(): string {
    return this.#bucket;
  }

  /** Creates (or binds to) the bucket; retried on the next call after a failure. */
  #open(): Promise<KV> {
    if (!this.#kv) {
      const kvm = new Kvm(jetstream(this.#nc, { timeout: this.#timeoutMs }));
      // An operator may have created the bucket with other settings: bind to it rather than fail.
      const opening = kvm
        .create(this.#bucket, { history: 1, description: 'Sluice: latest AliasRedirected per alias' })
        .catch(() => kvm.open(this.#bucket));
      opening.catch(() => {
        if (this.#kv === opening) this.#kv = null;
      });
      this.#kv = opening;
    }
    return this.#kv;
  }

  /** Runs `op` on the bucket; if it fails (e.g. the bucket vanished with a wiped server), reopens once. */
  async #withKv<T>(op: (kv: KV) => Promise<T>): Promise<T> {
    const kv = await this.#open();
    try {
      return await op(kv);
    } catch {
      this.#kv = null;
      return op(await this.#open());
    }
  }

  /** Stores `event` as its host's alias's latest unless the bucket already holds a newer (or the same) redirect. */
  async put(event: AliasRedirected): Promise<void> {
    const key = aliasKey(event.host, event.alias);
    const data = JSON.stringify(event);
    await this.#withKv(async (kv) => {
      let lastError: unknown;
      for (let attempt = 0; attempt < WRITE_ATTEMPTS; attempt++) {
        const entry = await kv.get(key);
        try {
          if (entry && entry.operation === 'PUT') {
            const current = decodeJson(entry.value, AliasRedirectedSchema, this.#maxBytes);
            if (
              current.ok &&
              (aliasEventKey(current.value) === aliasEventKey(event) ||
                isOlderAliasEvent(event, current.value))
            ) {
              return;
            }
            await kv.update(key, data, entry.revision);
          } else {
            await kv.create(key, data);
          }
          return;
        } catch (err) {
          // Lost a compare-and-set race with another publisher: read again and decide again.
          lastError = err;
        }
      }
      throw lastError;
    });
  }

  /**
   * The latest redirect of every alias (of `host` only, when given), sorted by host and alias; malformed entries
   * (and entries of an older layout without a host) are logged and skipped.
   */
  async list(host?: string): Promise<AliasRedirected[]> {
    return this.#withKv(async (kv) => {
      const keys: string[] = [];
      for await (const key of await kv.keys(host === undefined ? '>' : `${kvKey(host)}.*`)) keys.push(key);
      const events: AliasRedirected[] = [];
      for (const key of keys) {
        const entry = await kv.get(key);
        if (entry?.operation !== 'PUT') continue;
        const decoded = decodeJson(entry.value, AliasRedirectedSchema, this.#maxBytes);
        if (decoded.ok && (host === undefined || decoded.value.host === host)) events.push(decoded.value);
        else if (decoded.ok) continue;
        else logDropped(this.#logger, `kv ${this.#bucket}/${key}`, decoded.reason, entry.value);
      }
      return events.sort(byHostAndAlias);
    });
  }
}
