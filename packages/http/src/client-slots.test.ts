import { ErrorCode, QueueFullError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import {
  addressClient,
  ClientSlots,
  StreamAdmission,
  type StreamBound,
  tokenClient,
} from './client-slots.js';

describe('ClientSlots', () => {
  it('bounds each client on its own and gives a slot back per close', () => {
    const slots = new ClientSlots(2);
    slots.take('a');
    slots.take('a');
    expect([slots.isFull('a'), slots.isFull('b'), slots.heldBy('a'), slots.clients]).toEqual([
      true,
      false,
      2,
      1,
    ]);
    slots.give('a');
    expect([slots.isFull('a'), slots.heldBy('a')]).toEqual([false, 1]);
    slots.give('a');
    expect([slots.heldBy('a'), slots.clients]).toEqual([0, 0]);
  });

  it('refuses a bound that is not a positive integer', () => {
    expect(() => new ClientSlots(0)).toThrow(RangeError);
    expect(() => new ClientSlots(1.5)).toThrow(RangeError);
  });
});

describe('tokenClient / addressClient', () => {
  it('is the subject, else the JWT id, else a hash of the token (never the token itself)', () => {
    expect(tokenClient('t1', { sub: 'ana', jti: 'x' })).toBe('sub:ana');
    expect(tokenClient('t2', { sub: 'ana' })).toBe('sub:ana');
    expect(tokenClient('t1', { jti: 'x' })).toBe('jti:x');
    const listed = tokenClient('a-long-random-listed-token', null);
    expect(listed).toMatch(/^token:[\w-]{22}$/);
    expect(listed).not.toContain('a-long-random-listed-token');
    expect(tokenClient('another-long-random-token', null)).not.toBe(listed);
    expect(addressClient('127.0.0.2')).toBe('address:127.0.0.2');
    expect(addressClient(undefined)).toBe('address:unknown');
  });
});

describe('StreamAdmission', () => {
  function admission(refused: StreamBound[]) {
    return new StreamAdmission({
      streams: 'change feeds',
      process: 'api-server',
      max: { value: 3, setting: 'api.changes.maxSubscribers' },
      perClient: { value: 2, setting: 'api.changes.maxPerClient' },
      retryAfterSeconds: 5,
      onRefusal: (bound) => refused.push(bound),
    });
  }

  it('refuses a client at its own bound while others still open, naming the bound that refused', () => {
    const refused: StreamBound[] = [];
    const streams = admission(refused);
    streams.take('a');
    streams.take('a');
    const byClient = streams.refusal('a', 2, false);
    expect(byClient).toBeInstanceOf(QueueFullError);
    expect([byClient?.code, byClient?.retryAfterSeconds, byClient?.details]).toEqual([
      ErrorCode.QUEUE_FULL,
      5,
      { retryAfterSeconds: 5, limit: 'api.changes.maxPerClient', max: 2 },
    ]);
    expect(byClient?.message).toBe(
      'This client has 2 change feeds open on this api-server, as many as one client may; close one or retry later',
    );
    expect(streams.refusal('b', 2, false)).toBeNull();
    expect(refused).toEqual(['client']);
    streams.give('a');
    expect([streams.refusal('a', 1, false), streams.clients]).toEqual([null, 1]);
  });

  it('refuses everyone at the process bound or while closing', () => {
    const refused: StreamBound[] = [];
    const streams = admission(refused);
    const full = streams.refusal('b', 3, false);
    expect(full?.details).toEqual({ retryAfterSeconds: 5, limit: 'api.changes.maxSubscribers', max: 3 });
    expect(full?.message).toBe('This api-server has as many change feeds open as it accepts; retry later');
    expect(streams.refusal('b', 0, true)?.details).toMatchObject({ limit: 'api.changes.maxSubscribers' });
    expect(refused).toEqual(['server', 'server']);
  });
});
