import { describe, expect, it } from 'vitest';
import { addressClient, ClientSlots, tokenClient } from './client-slots.js';

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
