import { describe, expect, it } from 'vitest';
import { lagUnitOf } from './lag-unit.js';

describe('lagUnitOf', () => {
  it("names what each source's lag counts: a file's bytes, a stream's messages; none for PostgreSQL", () => {
    expect(lagUnitOf({ type: 'file', path: './items.jsonl', format: 'jsonl', follow: false })).toBe('bytes');
    expect(lagUnitOf({ type: 'jetstream', stream: 'ITEMS', subject: 'items.>' })).toBe('messages');
    expect(lagUnitOf({ type: 'postgres', connection: 'db', table: 'items' })).toBeNull();
  });
});
