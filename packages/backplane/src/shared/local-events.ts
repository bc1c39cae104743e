import type { Logger, Registration, SluiceEvent, SluiceEventType, SubscribeOptions } from '@sluice/core';
import { PayloadTooLargeError, parseOrThrow, SluiceEventSchema } from '@sluice/core';
import { z } from 'zod';
import { LatestAliasEvents } from './alias-latest.js';
import { OrderedDelivery } from './delivery.js';
import { DEFAULT_MAX_MESSAGE_BYTES } from './wire.js';

const TypesSchema = z
  .array(z.enum(['AliasRedirected', 'SnapshottingDone']))
  .max(16)
  .optional();

/** Validates subscribe options (the event types, if given, must be known ones). */
export function checkSubscribeTypes(options: SubscribeOptions | undefined): SluiceEventType[] | undefined {
  return parseOrThrow(TypesSchema, options?.types, 'Invalid subscribe options');
}

/**
 * In-process event fan-out for the single-node and direct-address strategies: validated like the network, each
 * subscriber in order, the latest `AliasRedirected` per alias kept for late readers.
 */
export class LocalEventBus {
  readonly #subscribers = new Set<OrderedDelivery>();
  readonly #latest = new LatestAliasEvents();
  readonly #logger: Logger;
  readonly #maxBytes: number;

  constructor(logger: Logger, maxBytes = DEFAULT_MAX_MESSAGE_BYTES) {
    this.#logger = logger;
    this.#maxBytes = maxBytes;
  }

  publish(event: SluiceEvent): void {
    const valid = parseOrThrow(SluiceEventSchema, event, 'Invalid event');
    // A copy per publish, so a subscriber mutating its event cannot change what others see.
    const json = JSON.stringify(valid);
    if (Buffer.byteLength(json) > this.#maxBytes) throw new PayloadTooLargeError(this.#maxBytes);
    this.#latest.offer(valid);
    for (const subscriber of this.#subscribers) {
      if (subscriber.wants(valid.type)) subscriber.deliver(JSON.parse(json) as SluiceEvent);
    }
  }

  subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options: SubscribeOptions | undefined,
  ): Registration {
    const types = checkSubscribeTypes(options);
    const delivery = new OrderedDelivery(handler, types, this.#logger);
    this.#subscribers.add(delivery);
    const close = async () => {
      this.#subscribers.delete(delivery);
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  latest(): SluiceEvent[] {
    return this.#latest.list();
  }

  clear(): void {
    this.#subscribers.clear();
  }
}
