import type { ServerResponse } from 'node:http';
import {
  type ChangeEntry,
  InternalError,
  type Logger,
  type PinnedGeneration,
  type ReadableCache,
} from '@sluice/core';
import { atExpiry } from '@sluice/http';
import type { PositionSeal } from '../position-seal.js';
import type { EndpointRegistry } from '../registry.js';
import { waitForDrain } from './drain.js';
import { type FeedFilter, FeedFilterUnfit, type RecordMatch } from './feed-filter.js';
import { FEED_NEXT, FeedPhase, positionProblem, ResetReason } from './feed-phase.js';
import type { GenerationFollower, LiveSubscriber } from './follower.js';
import {
  commentFrame,
  commitFrame,
  entryFrame,
  entryFrameWithId,
  FeedEvent,
  sseFrame,
  TOKEN_EXPIRED_FRAME,
  withId,
} from './frames.js';
import { type MergeCut, mergeFrames, resumedMergeFrames, type SwitchSide, sameKeys } from './switch-merge.js';
import { encodeFeedToken, type FeedPosition, type MergePosition } from './token.js';

/** A generation a feed reads, and how to let go of it (a registry lease, or a cache opened by name). */
export interface HeldGeneration {
  readonly name: string;
  readonly cache: ReadableCache;
  release(): void;
}

/** What a subscriber needs from the hub that serves it. */
export interface FeedContext {
  readonly alias: string;
  readonly registry: EndpointRegistry;
  readonly logger: Logger;
  /** Seals a row-filtered subscriber's tokens (token.ts); null when auth is off. */
  readonly seal: PositionSeal | null;
  /** Unread bytes a live subscriber may have when new changes arrive before it is cut off. */
  readonly bufferBytes: number;
  /** How long a snapshot, catch-up or switch waits for the client to read before it is cut off. */
  readonly drainTimeoutMs: number;
  /** The shared follower of a generation (created on first use). */
  follower(generation: HeldGeneration): GenerationFollower;
  /** Takes a subscriber off its generation's follower, if it is on one. */
  detach(generation: string, feed: FeedSubscriber): void;
  /** A lease on the generation serving the alias now. */
  current(): HeldGeneration;
  onCutOff(feed: FeedSubscriber): void;
  onClose(feed: FeedSubscriber): void;
}

/** How a subscription starts: from a token, or with a snapshot. */
export type FeedStart = { kind: 'snapshot' } | { kind: 'resume'; position: FeedPosition };

/** Entries read per chunk while catching up, and records written between two back-pressure checks. */
const CHUNK = 500;

class Closed extends Error {}

/**
 * One change-feed connection. It starts from a snapshot or a token, catches up from the change log with
 * back-pressure, then goes live on its generation's shared follower; when the alias moves it sends `switch`,
 * the merge of both generations by primary key, and continues on the new one. A live subscriber that leaves
 * more than `bufferBytes` unread is cut off (the socket is destroyed; it resumes by token).
 */
export class FeedSubscriber implements LiveSubscriber {
  #phase: FeedPhase = FeedPhase.starting;
  nextSeq = 1;
  private on: HeldGeneration | null = null;
  private readonly pins = new Set<PinnedGeneration>();
  /** Cancels the end at the token's expiry (a no-op without one). */
  private readonly cancelExpiry: () => void;
  /** The view its event tokens carry (feed-filter.ts `FeedFilter.view`); undefined: it sees every record. */
  private readonly view: string | undefined;

  constructor(
    private readonly ctx: FeedContext,
    private readonly res: ServerResponse,
    /** The feed's `filter=` and token row filter, checked and compiled for each generation it reads (null: none). */
    private readonly filters: FeedFilter | null = null,
    /**
     * When the request's bearer token expires (epoch ms), or null: the feed ends then, as any request after that
     * instant is refused; the client's reconnect with the same token is a 401.
     */
    expiresAt: number | null = null,
  ) {
    res.on('close', () => this.close());
    this.view = filters?.view ?? undefined;
    this.cancelExpiry = expiresAt === null ? () => {} : atExpiry(expiresAt, () => this.expire());
  }

  /**
   * The token has a row filter: `commit` events carry only the positions it may see (no counts of records, which
   * would tell how many it cannot see), so the frames shared with unfiltered subscribers are not sent as they are.
   */
  private get rowFiltered(): boolean {
    return this.filters?.rowFiltered === true;
  }

  /**
   * Which records of `generation` are in this subscriber's view (null: all). A filter that does not fit the
   * generation's fields throws {@link FeedFilterUnfit}, which ends the feed.
   */
  private matchesIn(generation: HeldGeneration): RecordMatch | null {
    return this.filters === null ? null : this.filters.matchesIn(generation.cache, generation.name);
  }

  /**
   * The token (`id`) of a position of this feed: it names the endpoint and, for a filtered feed, its view; a
   * row-filtered feed's is sealed (its sequence counts the changes of records the row filter hides).
   */
  private token(generation: string, seq: number, merge?: MergePosition): string {
    const position: FeedPosition = {
      endpoint: this.ctx.alias,
      generation,
      seq,
      ...(merge ? { merge } : {}),
      ...(this.view !== undefined ? { view: this.view } : {}),
    };
    if (!this.rowFiltered) return encodeFeedToken(position);
    // Fails closed: a row filter comes from a verified token, so the server has a secret to seal with.
    if (this.ctx.seal === null)
      throw new InternalError('a row-filtered change feed needs the token seal (api.auth)');
    return encodeFeedToken(position, this.ctx.seal);
  }

  /** The token expired: a comment saying so, then the end of the stream (the client resumes by token). */
  private expire(): void {
    this.send(TOKEN_EXPIRED_FRAME);
    this.end();
  }

  /** The phase of the subscription (it changes only through {@link FeedSubscriber.enter}). */
  get phase(): FeedPhase {
    return this.#phase;
  }

  /**
   * The one place the phase changes. Entering any phase after `closed` ends the current step quietly (the
   * connection went away while it awaited); any other move outside {@link FEED_NEXT} is a bug and throws.
   */
  private enter(next: FeedPhase): void {
    if (FEED_NEXT[this.#phase].includes(next)) {
      this.#phase = next;
      return;
    }
    if (this.#phase === FeedPhase.closed) throw new Closed();
    throw new InternalError(`change feed of ${this.ctx.alias}: ${this.#phase} → ${next} is not a transition`);
  }

  /** Where the subscriber is (for tests and logs). */
  get generation(): string | null {
    return this.on?.name ?? null;
  }

  /** Runs the subscription until the connection closes. Never throws. */
  async run(start: FeedStart, first: HeldGeneration): Promise<void> {
    this.on = first;
    await this.runStep(() => (start.kind === 'snapshot' ? this.snapshot(null) : this.resume(start.position)));
  }

  private async resume(position: FeedPosition): Promise<void> {
    // A position in what another view was sent: the subscriber holds records this view hides and lacks records
    // it shows that have not changed since, which no change after the position would fix. Start over. So does a
    // row-filtered feed given a position it did not seal: made by hand (or issued before tokens were sealed), it
    // could probe the log (resets at sequences of the prober's choosing tell how many changes the log holds).
    if (position.view !== this.view || (this.rowFiltered && position.sealed !== true))
      return this.snapshot(ResetReason.filterChanged);
    if (position.merge) return this.resumeMerge(position, position.merge);
    const current = this.held();
    if (position.generation === current.name) {
      const reset = positionProblem(position.seq, current.cache.changeLog().head());
      if (reset) return this.snapshot(reset);
      this.nextSeq = position.seq + 1;
      return this.attach();
    }
    // Another api-server may have served the token from a generation this process has not switched to yet:
    // catch up with the alias table first.
    await this.ctx.registry.reconcile();
    this.checkOpen();
    if (this.ctx.registry.current(this.ctx.alias)?.name === position.generation) {
      current.release();
      this.on = this.ctx.current();
      return this.resume(position);
    }
    // A generation the alias has left: follow it from the token, then switch, while it still exists.
    let old: ReadableCache;
    try {
      old = await this.ctx.registry.openGeneration(position.generation);
    } catch {
      return this.snapshot(ResetReason.generationGone);
    }
    if (this.#phase === FeedPhase.closed) {
      // The connection closed while the generation opened: nobody else will close it.
      await old.close();
      throw new Closed();
    }
    const reset =
      old.endpoint !== this.ctx.alias || !this.fitsIn(old)
        ? ResetReason.unknownPosition
        : positionProblem(position.seq, old.changeLog().head());
    if (reset) {
      await old.close();
      return this.snapshot(reset);
    }
    current.release();
    this.on = { name: old.name, cache: old, release: () => void old.close() };
    this.nextSeq = position.seq + 1;
    return this.switchGeneration();
  }

  /**
   * Whether the feed's filter fits an old generation a token names. One that does not cannot say what the
   * subscriber had: it starts over from the serving generation (reset, snapshot), whose fit was checked at connect.
   */
  private fitsIn(old: ReadableCache): boolean {
    try {
      this.matchesIn({ name: old.name, cache: old, release: () => {} });
      return true;
    } catch (err) {
      if (err instanceof FeedFilterUnfit) return false;
      throw err;
    }
  }

  /**
   * A token of a switch's merge: the subscriber was cut off in the middle of it and holds some records of each
   * side. Both generations are opened again and sent what turns that mixture into the new one's records now
   * (switch-merge.ts, `resumedMergeFrames`), then its `commit`; it goes on from there (and switches again if the
   * alias has moved on since). A side gone, a log trimmed past the cut, or another primary key: `reset`, snapshot.
   */
  private async resumeMerge(position: FeedPosition, cut: MergePosition): Promise<void> {
    // Another api-server may have issued the token from a switch this process has not seen yet.
    await this.ctx.registry.reconcile();
    this.checkOpen();
    const from = await this.openByName(position.generation);
    const to = from === null ? null : await this.openByName(cut.generation);
    if (this.#phase === FeedPhase.closed) {
      from?.release();
      to?.release();
      throw new Closed();
    }
    if (from === null || to === null) {
      from?.release();
      return this.snapshot(ResetReason.generationGone);
    }
    if (
      from.cache.endpoint !== this.ctx.alias ||
      to.cache.endpoint !== this.ctx.alias ||
      !this.fitsIn(from.cache) ||
      !this.fitsIn(to.cache) ||
      !sameKeys(from.cache, to.cache)
    ) {
      from.release();
      to.release();
      return this.snapshot(ResetReason.unknownPosition);
    }
    this.held().release();
    this.on = from;
    return this.finishMerge(to, { fromSeq: position.seq, toSeq: cut.seq });
  }

  /**
   * Sends the rest of a merge cut off at `cut` into `to` (held by the caller until it is `this.on`), its `commit`,
   * then follows `to`. A log that no longer holds the entries after its side's cut (trimmed), or never held that
   * position: `reset`, snapshot.
   */
  private async finishMerge(to: HeldGeneration, cut: MergeCut): Promise<void> {
    this.enter(FeedPhase.switching);
    const from = this.held();
    const pinFrom = this.pin(from.cache);
    let reset: ResetReason | null = null;
    try {
      const keepNew = this.matchesIn(to);
      const keepOld = this.matchesIn(from);
      const pinTo = this.pin(to.cache);
      // Checked on the pins the merge reads, not on a look at the logs before pinning: the writer may trim a log
      // past the cut in between, and a pinned log read from a trimmed sequence starts at its oldest entry — the
      // changes before it (a delete among them) would be missed without a word.
      reset = positionProblem(cut.fromSeq, pinFrom.head) ?? positionProblem(cut.toSeq, pinTo.head);
      if (reset === null) {
        // The first cut's sequence, not this pin's: cut off again, the subscriber may still hold records of `to`
        // as they were at the first cut (the part of this merge it had not reached).
        const mergeId = this.token(from.name, cut.fromSeq, { generation: to.name, seq: cut.toSeq });
        let written = 0;
        await resumedMergeFrames({ pin: pinFrom, cache: from.cache }, { pin: pinTo, cache: to.cache }, cut, {
          id: mergeId,
          keepOld: keepOld ?? (() => true),
          keepNew: keepNew ?? (() => true),
          emit: async (text) => {
            this.send(text);
            if (++written % CHUNK === 0) await this.flush();
          },
        });
        this.sendSwitchCommit(to, pinTo);
      }
      this.unpin(pinTo);
    } catch (err) {
      to.release();
      throw err;
    } finally {
      this.unpin(pinFrom);
    }
    if (reset !== null) {
      // The snapshot lets go of `from` (this.on).
      to.release();
      return this.snapshot(reset);
    }
    from.release();
    this.on = to;
    await this.flush();
    return this.attach();
  }

  /** A generation by name: a lease when it serves the alias now, else opened read-only; null when it is gone. */
  private async openByName(name: string): Promise<HeldGeneration | null> {
    if (this.ctx.registry.current(this.ctx.alias)?.name === name) {
      const lease = this.ctx.current();
      if (lease.name === name) return lease;
      lease.release();
    }
    try {
      const cache = await this.ctx.registry.openGeneration(name);
      return { name, cache, release: () => void cache.close() };
    } catch {
      return null;
    }
  }

  /** `reset {reason}` (when given), the records of one commit as upserts, `live`, then its changes. */
  private async snapshot(reason: ResetReason | null): Promise<void> {
    this.enter(FeedPhase.snapshot);
    const current = this.ctx.current();
    this.on?.release();
    this.on = current;
    const matches = this.matchesIn(current);
    if (reason) this.send(sseFrame(FeedEvent.reset, { reason }));
    const pin = this.pin(current.cache);
    try {
      const pk = current.cache.schema.primaryKey;
      let written = 0;
      for (const { record } of pin.records()) {
        if (matches && !matches(record)) continue;
        this.send(sseFrame(FeedEvent.upsert, { key: pk.map((f) => record[f]), record }));
        if (++written % CHUNK === 0) await this.flush();
      }
      const id = this.token(current.name, pin.head.last);
      this.send(sseFrame(FeedEvent.live, { generation: current.name }, id));
      this.nextSeq = pin.head.last + 1;
    } finally {
      this.unpin(pin);
    }
    await this.flush();
    return this.attach();
  }

  /** Catches up from the log (with back-pressure) to the follower, then goes live on it. */
  private async attach(): Promise<void> {
    for (;;) {
      this.checkOpen();
      const on = this.held();
      if (this.ctx.registry.current(this.ctx.alias)?.name !== on.name) return this.switchGeneration();
      // Compiled (or refused) here, in a step, so deliveries to a live subscriber never meet an unfit filter.
      this.matchesIn(on);
      const follower = this.ctx.follower(on);
      if (this.nextSeq > follower.lastSeen) {
        this.enter(FeedPhase.live);
        follower.add(this);
        return;
      }
      this.enter(FeedPhase.catchup);
      const log = on.cache.changeLog();
      if (this.nextSeq < log.head().first) return this.snapshot(ResetReason.retention);
      const entries = log.read(this.nextSeq - 1, Math.min(CHUNK, follower.lastSeen - this.nextSeq + 1));
      if (entries.length === 0 || entries[0]!.seq !== this.nextSeq)
        return this.snapshot(ResetReason.retention);
      this.writeEntries(entries, null);
      await this.flush();
    }
  }

  /**
   * The alias moved: the rest of the old generation's log, `switch {from, to}`, the upserts/deletes turning the
   * old generation's records into the new one's (merged by primary key, both pinned), a `commit` at the new
   * generation's position, then its changes. `switch` carries the old generation's token (a client cut off right
   * after it holds the old records: the merge is sent again); the merge's events carry a token naming both sides
   * and the new one's pinned sequence, so a client cut off among them gets what turns its mixture of both into the
   * new generation (resumeMerge) — the same merge again would miss what the new one deleted meanwhile.
   */
  private async switchGeneration(): Promise<void> {
    this.enter(FeedPhase.switching);
    const from = this.held();
    const pinFrom = this.pin(from.cache);
    let to: HeldGeneration | null = null;
    try {
      if (this.nextSeq < pinFrom.head.first) {
        this.unpin(pinFrom);
        return await this.snapshot(ResetReason.retention);
      }
      while (this.nextSeq <= pinFrom.head.last) {
        const entries = pinFrom.read(this.nextSeq - 1, CHUNK);
        if (entries.length === 0) break;
        this.writeEntries(entries, null);
        await this.flush();
      }
      to = this.ctx.current();
      // Before anything of the switch is sent: a filter that does not fit the new generation ends the feed here.
      const keepNew = this.matchesIn(to);
      const keepOld = this.matchesIn(from);
      const pinTo = this.pin(to.cache);
      const fromId = this.token(from.name, pinFrom.head.last);
      this.send(sseFrame(FeedEvent.switch, { from: from.name, to: to.name }, fromId));
      // The merge's events name both sides: a subscriber cut off among them resumes with resumeMerge.
      const mergeId = this.token(from.name, pinFrom.head.last, { generation: to.name, seq: pinTo.head.last });
      await this.merge({ pin: pinFrom, cache: from.cache }, { pin: pinTo, cache: to.cache }, mergeId, {
        keepOld,
        keepNew,
      });
      this.sendSwitchCommit(to, pinTo);
      this.unpin(pinTo);
    } catch (err) {
      to?.release();
      throw err;
    } finally {
      this.unpin(pinFrom);
    }
    from.release();
    this.on = to;
    await this.flush();
    return this.attach();
  }

  /** The `commit` that ends a switch's merge: at `to`'s last commit, with its token; the feed goes on after it. */
  private sendSwitchCommit(to: HeldGeneration, pinTo: PinnedGeneration): void {
    const last = pinTo.head.last >= pinTo.head.first ? pinTo.read(pinTo.head.last - 1, 1)[0] : undefined;
    const toId = this.token(to.name, pinTo.head.last);
    this.send(
      last?.op === 'commit'
        ? commitFrame(last.position, last.epoch, toId, this.rowFiltered)
        : commitFrame(null, null, toId, this.rowFiltered),
    );
    this.nextSeq = pinTo.head.last + 1;
  }

  /** Upserts/deletes that turn `from`'s records into `to`'s, for this subscriber's filter. */
  private async merge(
    from: SwitchSide,
    to: SwitchSide,
    id: string,
    filters: { keepOld: RecordMatch | null; keepNew: RecordMatch | null },
  ): Promise<void> {
    const all = () => true;
    let written = 0;
    const emit = async (text: string) => {
      this.send(text);
      if (++written % CHUNK === 0) await this.flush();
    };
    await mergeFrames(from, to, {
      id,
      keepOld: filters.keepOld ?? all,
      keepNew: filters.keepNew ?? all,
      emit,
    });
  }

  /** From the follower: new entries of this subscriber's generation. */
  deliver(entries: ChangeEntry[], frames: readonly string[], joined: () => Buffer): void {
    if (this.#phase !== FeedPhase.live) return;
    const skip = this.nextSeq - entries[0]!.seq;
    if (skip < 0) {
      // Should not happen (the follower is contiguous); never leave a gap: catch up from the log instead.
      this.ctx.detach(this.held().name, this);
      void this.runStep(() => this.attach());
      return;
    }
    if (skip >= entries.length) return;
    // Unread bytes beyond the allowance before this write: the client stopped reading (a reader that keeps up
    // has drained the last turn's writes, however large they were).
    if (this.res.writableLength > this.ctx.bufferBytes) {
      this.cutOff();
      return;
    }
    if (skip === 0 && this.filters === null && !this.rowFiltered) {
      this.send(joined());
      this.nextSeq = entries[entries.length - 1]!.seq + 1;
    } else this.writeEntries(entries.slice(skip), skip === 0 ? frames : frames.slice(skip));
  }

  generationLeft(): void {
    if (this.#phase !== FeedPhase.live) return;
    void this.runStep(() => this.switchGeneration());
  }

  fellBehind(): void {
    if (this.#phase !== FeedPhase.live) return;
    void this.runStep(() => this.snapshot(ResetReason.retention));
  }

  /** Runs one step of the subscription; a failure closes it (a closed connection is no failure). Never throws. */
  private async runStep(step: () => Promise<void>): Promise<void> {
    try {
      await step();
    } catch (err) {
      if (err instanceof Closed) return;
      if (err instanceof FeedFilterUnfit) {
        // Not a failure of the server: the endpoint's fields changed under the filter. The reconnect from the
        // last token gets the refusal a query gets (400 INVALID_QUERY, or 403 for a token's row filter).
        this.send(commentFrame(`${err.message}; reconnect to see the refusal`));
        this.end();
        return;
      }
      this.ctx.logger.warn({ err, alias: this.ctx.alias }, 'change feed failed; closing it');
      this.res.destroy();
      this.close();
    }
  }

  /**
   * Writes entries (filtered for this subscriber) and advances `nextSeq`. `frames` are the shared unfiltered frames
   * of `entries` (or null); a row-filtered subscriber frames its `commit`s itself.
   */
  private writeEntries(entries: ChangeEntry[], frames: readonly string[] | null): void {
    const on = this.held();
    let text = '';
    const matches = this.matchesIn(on);
    entries.forEach((entry, i) => {
      if (matches && entry.op !== 'commit' && !(entry.op === 'upsert' && matches(entry.record))) {
        // Not in this subscriber's view now: a delete if it was before (the subscriber has the record), else
        // nothing — not even its key. A log that does not say what the change replaced (entries logged before
        // it kept that) gets the delete, in case the subscriber had the record.
        const before = entry.before;
        if (before === null || (before !== undefined && !matches(before))) return;
        text += sseFrame(FeedEvent.delete, { key: entry.key }, this.token(on.name, entry.seq));
      } else if (this.rowFiltered && entry.op === 'commit')
        text += entryFrameWithId(entry, this.token(on.name, entry.seq), true);
      else {
        const shared = frames?.[i];
        if (shared === undefined)
          text +=
            this.view === undefined
              ? entryFrame(this.ctx.alias, on.name, entry)
              : entryFrameWithId(entry, this.token(on.name, entry.seq), false);
        // The shared frame's record JSON as it is; its token replaced by one carrying this feed's view.
        else text += this.view === undefined ? shared : withId(shared, this.token(on.name, entry.seq));
      }
    });
    this.send(text);
    this.nextSeq = entries[entries.length - 1]!.seq + 1;
  }

  /** Writes to the socket (a closed subscriber writes nothing). */
  send(text: string | Buffer): void {
    if (this.#phase === FeedPhase.closed || text.length === 0) return;
    this.res.write(text);
  }

  /** Waits until the client has read most of what was written; cut off after `drainTimeoutMs`. */
  private async flush(): Promise<void> {
    this.checkOpen();
    if (this.res.writableLength <= this.ctx.bufferBytes / 2) return;
    if (!(await waitForDrain(this.res, this.ctx.drainTimeoutMs))) this.cutOff();
    this.checkOpen();
  }

  private cutOff(): void {
    if (this.#phase === FeedPhase.closed) return;
    this.ctx.onCutOff(this);
    this.res.destroy();
    this.close();
  }

  private pin(cache: ReadableCache): PinnedGeneration {
    const pin = cache.changeLog().pin();
    this.pins.add(pin);
    return pin;
  }

  private unpin(pin: PinnedGeneration): void {
    if (this.pins.delete(pin)) pin.close();
  }

  private held(): HeldGeneration {
    if (!this.on) throw new Closed();
    return this.on;
  }

  private checkOpen(): void {
    if (this.#phase === FeedPhase.closed) throw new Closed();
  }

  /** Ends the stream cleanly (shutdown); the client resumes by token elsewhere. */
  end(): void {
    if (this.#phase === FeedPhase.closed) return;
    this.res.end();
    this.close();
  }

  /** Ends the subscription: off the follower, pins and lease released. Idempotent. */
  close(): void {
    if (this.#phase === FeedPhase.closed) return;
    const on = this.on;
    this.enter(FeedPhase.closed);
    this.cancelExpiry();
    if (on) this.ctx.detach(on.name, this);
    for (const pin of this.pins) pin.close();
    this.pins.clear();
    on?.release();
    this.on = null;
    this.ctx.onClose(this);
  }
}
