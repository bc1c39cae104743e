import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { PositionSeal } from '../position-seal.js';
import { decodeFeedToken, encodeFeedToken } from './token.js';

const BLUE = 'items-01m9691xxt7v4nhvv5srkrdbn6';
const GREEN = 'items-01m9692kkata6d1tf7rxsfjevh';

describe('change-feed tokens', () => {
  it('round-trip a position, and one of a merge naming both generations', () => {
    const plain = { endpoint: 'items', generation: BLUE, seq: 42 };
    expect(decodeFeedToken(encodeFeedToken(plain), 'items')).toEqual(plain);
    const merging = { ...plain, merge: { generation: GREEN, seq: 7 } };
    expect(decodeFeedToken(encodeFeedToken(merging), 'items')).toEqual(merging);
  });

  it('carry a filtered feed’s view last, so an unfiltered feed’s tokens keep their bytes; refuse a view never issued', () => {
    const plain = { endpoint: 'items', generation: BLUE, seq: 42 };
    const viewed = { ...plain, view: '0123456789abcdef012345' };
    expect(decodeFeedToken(encodeFeedToken(viewed), 'items')).toEqual(viewed);
    const merging = { ...viewed, merge: { generation: GREEN, seq: 7 } };
    expect(decodeFeedToken(encodeFeedToken(merging), 'items')).toEqual(merging);
    expect(encodeFeedToken(plain)).toBe(
      `c1.${Buffer.from(JSON.stringify(['items', BLUE, 42])).toString('base64url')}`,
    );
    const forge = (fields: unknown[]) => `c1.${Buffer.from(JSON.stringify(fields)).toString('base64url')}`;
    for (const view of [7, '', 'NOT-HEX', null])
      expect(() => decodeFeedToken(forge(['items', BLUE, 1, view]), 'items')).toThrow(
        /not a change-feed token/,
      );
    expect(() => decodeFeedToken(forge(['items', BLUE, 1, GREEN, 2, 3, 'ab']), 'items')).toThrow(
      /not a change-feed token/,
    );
  });

  it('refuse a merge token whose target is no generation of the endpoint or its own generation, or whose sequence is no sequence', () => {
    const forge = (fields: unknown[]) => `c1.${Buffer.from(JSON.stringify(fields)).toString('base64url')}`;
    expect(() => decodeFeedToken(forge(['items', BLUE, 1, 'items', 3]), 'items')).toThrow(
      /names no generation of this endpoint/,
    );
    expect(() => decodeFeedToken(forge(['items', BLUE, 1, GREEN, -1]), 'items')).toThrow(
      /not a change-feed token/,
    );
    expect(() => decodeFeedToken(forge(['items', BLUE, 1, GREEN]), 'items')).toThrow(
      /not a change-feed token/,
    );
    expect(() => decodeFeedToken(forge(['items', BLUE, 1, BLUE, 1]), 'items')).toThrow(
      /a merge of a generation into itself/,
    );
  });

  it('seal a row-filtered feed’s position: opened only with the seal, and marked sealed', () => {
    const seal = new PositionSeal('token-test-secret-0123456789abcdef');
    const position = { endpoint: 'items', generation: BLUE, seq: 42, view: '0123456789abcdef012345' };
    const token = encodeFeedToken(position, seal);
    expect(token.startsWith('s1.')).toBe(true);
    expect(decodeFeedToken(token, 'items', 'querystring.after', seal)).toEqual({ ...position, sealed: true });
    expectSluiceError(() => decodeFeedToken(token, 'items'), 'VALIDATION_FAILED');
    expectSluiceError(() => decodeFeedToken(token, 'orders', 'querystring.after', seal), 'VALIDATION_FAILED');
    const other = new PositionSeal('another-secret-of-enough-length!!');
    expectSluiceError(
      () => decodeFeedToken(token, 'items', 'headers.last-event-id', other),
      'VALIDATION_FAILED',
    );
  });
});
