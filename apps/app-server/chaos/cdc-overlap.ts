/**
 * The CDC chaos run's `--overlap` schedule: four lanes — the app-server, PostgreSQL, the api-server, rebuilds —
 * each injecting its kinds (once per round, shuffled, 1–4 s apart; the api-server's 3–8 s) on its own seeded clock, so faults overlap and
 * land within a second of each other. Only faults signalling the same part wait for each other (a SIGCONT must not
 * resume a pause another fault holds); a rebuild holds no part, so an app-server kill or pause lands while its
 * green builds. The combined kinds (cdc-faults.ts's CDC_OVERLAP_FAULTS) make the interesting overlaps certain.
 */
import { sleep } from '@sluice/testkit';
import {
  CDC_FAULTS,
  CDC_OVERLAP_FAULTS,
  type CdcFault,
  type CdcFaultInjector,
  type FaultTarget,
  type HoldTarget,
} from './cdc-faults.js';
import type { Rng } from './options.js';

/** How much the faults overlapped. */
export interface OverlapCounts {
  /** Faults that started while another was in progress. */
  overlapping: number;
  /** Faults that started less than a second after the previous one started. */
  withinASecond: number;
  /** `running+started` → how often a fault of the second kind started while one of the first was in progress. */
  pairs: Record<string, number>;
}

interface Lane {
  kinds: readonly CdcFault[];
  /** The pause before each fault, in ms: the api-server's lane waits longer, or readers would mostly find it down. */
  gap: readonly [number, number];
}

const LANES: readonly Lane[] = [
  { kinds: ['app-kill', 'app-pause'], gap: [1_000, 4_000] },
  { kinds: ['postgres-restart', 'postgres-restart-commit', 'postgres-restart-paused'], gap: [1_000, 4_000] },
  { kinds: ['api-kill'], gap: [3_000, 8_000] },
  { kinds: ['rebuild', 'rebuild-app-kill', 'api-kill-switch'], gap: [1_000, 4_000] },
];

// Every kind has its lane.
for (const kind of [...CDC_FAULTS, ...CDC_OVERLAP_FAULTS])
  if (!LANES.some((lane) => lane.kinds.includes(kind))) throw new Error(`fault ${kind} has no lane`);

/** One part at a time: a queue of waiters, each let in when the one before releases. */
class PartLock {
  #tail: Promise<void> = Promise.resolve();

  async run<T>(step: () => Promise<T>): Promise<T> {
    const before = this.#tail;
    let release = () => {};
    this.#tail = new Promise((resolve) => {
      release = resolve;
    });
    await before;
    try {
      return await step();
    } finally {
      release();
    }
  }
}

export class CdcOverlapSchedule {
  readonly overlap: OverlapCounts = { overlapping: 0, withinASecond: 0, pairs: {} };
  readonly #locks: Record<FaultTarget, PartLock> = {
    app: new PartLock(),
    postgres: new PartLock(),
    api: new PartLock(),
  };
  readonly #active = new Map<number, CdcFault>();
  #lastStart = Number.NEGATIVE_INFINITY;
  #nextId = 0;

  constructor(
    private readonly faults: CdcFaultInjector,
    private readonly rng: Rng,
  ) {}

  /** Runs every lane until `until` (a Date.now() value), each at least one round of its kinds. */
  async run(until: number): Promise<void> {
    // Forked before any lane draws: a lane's draws do not depend on how the others interleave.
    const rngs = LANES.map((_, i) => this.rng.fork(11 + i));
    this.faults.faultsUntil = until;
    await Promise.all(LANES.map((lane, i) => this.#lane(lane, rngs[i]!, until)));
  }

  async #lane({ kinds, gap }: Lane, rng: Rng, until: number): Promise<void> {
    const hold: HoldTarget = (target, step) => this.#locks[target].run(step);
    let round: CdcFault[] = [];
    let rounds = 0;
    while (Date.now() < until || rounds === 0) {
      await sleep(rng.int(gap[0], gap[1]));
      if (round.length === 0) round = shuffled(kinds, rng);
      const kind = round.shift()!;
      const id = this.#started(kind);
      try {
        await this.faults.inject(kind, rng, hold);
      } finally {
        this.#active.delete(id);
      }
      if (round.length === 0) rounds += 1;
    }
  }

  #started(kind: CdcFault): number {
    const now = Date.now();
    if (this.#active.size > 0) this.overlap.overlapping += 1;
    for (const running of new Set(this.#active.values())) {
      const pair = `${running}+${kind}`;
      this.overlap.pairs[pair] = (this.overlap.pairs[pair] ?? 0) + 1;
    }
    if (now - this.#lastStart < 1_000) this.overlap.withinASecond += 1;
    this.#lastStart = now;
    const id = this.#nextId++;
    this.#active.set(id, kind);
    return id;
  }
}

function shuffled<T>(items: readonly T[], rng: Rng): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.int(0, i);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
