/**
 * The transfers this process runs, and the one place where a terminate request meets its responder. Every
 * strategy routes terminate requests here, so "the owner stops the work exactly once" holds no matter how
 * many requests arrive (concurrent ones share the same stop; later ones get the same acknowledgement).
 */
import type { OwnerReport, TransferResponder } from '@sluice/core';
import { ValidationError } from '@sluice/core';
import { checkOwnerReport } from './wire.js';

interface Entry {
  responder: TransferResponder;
  /** The one stop of this registration, once requested. */
  stopping: Promise<void> | null;
}

export class LocalRegistry {
  readonly #entries = new Map<string, Entry>();

  /**
   * Registers `responder` for `transferId`; returns a function that unregisters it (only this registration).
   * A second registration of the same id in one process is a programming error.
   */
  add(transferId: string, responder: TransferResponder): () => void {
    if (this.#entries.has(transferId)) {
      throw new ValidationError(`This node already serves transfer "${transferId}"`, [
        { path: 'transferId', message: 'already served by this node' },
      ]);
    }
    const entry: Entry = { responder, stopping: null };
    this.#entries.set(transferId, entry);
    return () => {
      if (this.#entries.get(transferId) === entry) this.#entries.delete(transferId);
    };
  }

  has(transferId: string): boolean {
    return this.#entries.has(transferId);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The validated report for `transferId`, or null when this process does not run it. Throws if the responder's report is invalid. */
  report(transferId: string): OwnerReport | null {
    const entry = this.#entries.get(transferId);
    return entry ? checkOwnerReport(entry.responder.report()) : null;
  }

  /**
   * Stops `transferId` if this process runs it: resolves true once stopped, false when not running here. The
   * responder's `terminate()` runs at most once per registration; if it fails, a later request may retry.
   */
  async terminate(transferId: string): Promise<boolean> {
    const entry = this.#entries.get(transferId);
    if (!entry) return false;
    if (!entry.stopping) {
      entry.stopping = Promise.resolve()
        .then(() => entry.responder.terminate())
        .catch((err: unknown) => {
          entry.stopping = null;
          throw err;
        });
    }
    await entry.stopping;
    return true;
  }

  ids(): string[] {
    return [...this.#entries.keys()];
  }

  clear(): void {
    this.#entries.clear();
  }
}
