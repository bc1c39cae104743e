import type { ChangeEntry, Logger, ReadableCache } from '@sluice/core';

/** What a follower delivers to: a live subscriber of its generation. */
export interface LiveSubscriber {
  /** The next sequence the subscriber expects. */
  readonly nextSeq: number;
  /** New entries of the generation (contiguous, starting at or before `nextSeq`); `frames[i]` is entry i unfiltered. */
  deliver(entries: ChangeEntry[], frames: readonly string[], joined: () => Buffer): void;
  /** The alias left this generation: run the switch. */
  generationLeft(): void;
  /** The log was trimmed past what the follower had read (it fell behind retention). */
  fellBehind(): void;
}

/** Most entries read per check; more wait for the next turn of the event loop (never blocks it for long). */
const MAX_PER_TICK = 2_000;

/**
 * Follows one generation's change log for every live subscriber of this process: one `head()` check per
 * `pollMs` (a single small LMDB read of the latest commit — cheap, and commits of the app-server's process are
 * seen without any event), one read of the new entries, framed once and handed to each subscriber. It also
 * notices when the alias moved away from its generation.
 */
export class GenerationFollower {
  /** The last sequence read and delivered. */
  lastSeen: number;
  private readonly subscribers = new Set<LiveSubscriber>();
  private timer: NodeJS.Timeout | null = null;
  private draining = false;

  constructor(
    readonly name: string,
    private readonly cache: ReadableCache,
    private readonly frame: (entry: ChangeEntry) => string,
    private readonly stillServing: () => boolean,
    private readonly pollMs: number,
    private readonly logger: Logger,
    private readonly onIdle: () => void,
  ) {
    this.lastSeen = cache.changeLog().head().last;
  }

  get size(): number {
    return this.subscribers.size;
  }

  add(subscriber: LiveSubscriber): void {
    this.subscribers.add(subscriber);
    if (!this.timer) {
      this.timer = setInterval(() => this.tick(), this.pollMs);
      this.timer.unref();
    }
  }

  remove(subscriber: LiveSubscriber): void {
    this.subscribers.delete(subscriber);
    if (this.subscribers.size === 0) this.stop();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.onIdle();
  }

  /** Checks for new commits now (also called by the timer). */
  tick(): void {
    if (this.draining) return;
    if (!this.stillServing()) {
      const leaving = [...this.subscribers];
      this.subscribers.clear();
      this.stop();
      for (const subscriber of leaving) subscriber.generationLeft();
      return;
    }
    let head: { first: number; last: number };
    try {
      head = this.cache.changeLog().head();
    } catch (err) {
      this.logger.warn({ err, cache: this.name }, 'reading the change-log head failed');
      return;
    }
    if (head.last <= this.lastSeen) return;
    if (head.first > this.lastSeen + 1) {
      const behind = [...this.subscribers];
      this.subscribers.clear();
      this.lastSeen = head.last;
      this.stop();
      for (const subscriber of behind) subscriber.fellBehind();
      return;
    }
    const entries = this.cache.changeLog().read(this.lastSeen, MAX_PER_TICK);
    if (entries.length === 0) return;
    this.lastSeen = entries[entries.length - 1]!.seq;
    const frames = entries.map(this.frame);
    // Encoded once, the same bytes written to every unfiltered subscriber's socket.
    let joined: Buffer | null = null;
    const join = () => {
      joined ??= Buffer.from(frames.join(''), 'utf8');
      return joined;
    };
    for (const subscriber of [...this.subscribers]) subscriber.deliver(entries, frames, join);
    if (this.lastSeen < head.last) {
      // More than one turn's worth: continue after I/O had its turn.
      this.draining = true;
      setImmediate(() => {
        this.draining = false;
        this.tick();
      });
    }
  }
}
