import { describe, expect, it } from 'vitest';
import { PositionSeal, SealPurpose } from './position-seal.js';

describe('sealed positions', () => {
  const seal = new PositionSeal('position-seal-test-secret-0123456789');

  it('opens what it sealed, and the sealed text shows none of it', () => {
    const text = JSON.stringify(['items', 'items-01m9691xxt7v4nhvv5srkrdbn6', 57, '0123456789abcdef012345']);
    const sealed = seal.seal(SealPurpose.feedToken, text);
    expect(seal.open(SealPurpose.feedToken, sealed)).toBe(text);
    expect(Buffer.from(sealed, 'base64url').toString('latin1')).not.toContain('items');
    // The same position seals to the same bytes (answers of the fast routes equal fastify's); another does not.
    expect(seal.seal(SealPurpose.feedToken, text)).toBe(sealed);
    expect(seal.seal(SealPurpose.feedToken, text.replace('57', '58'))).not.toBe(sealed);
  });

  it('opens nothing altered, made up, sealed for another purpose or under another secret', () => {
    const sealed = seal.seal(SealPurpose.cursor, 'aXRlbXM.eyJjIjoxfQ');
    const bytes = Buffer.from(sealed, 'base64url');
    bytes[14] = (bytes[14] ?? 0) ^ 1;
    expect(seal.open(SealPurpose.cursor, bytes.toString('base64url'))).toBeNull();
    expect(seal.open(SealPurpose.feedToken, sealed)).toBeNull();
    expect(new PositionSeal('another-secret-of-enough-length!!').open(SealPurpose.cursor, sealed)).toBeNull();
    for (const made of ['', 'abc', 'not base64url!', 'A'.repeat(40)])
      expect(seal.open(SealPurpose.cursor, made)).toBeNull();
  });
});
