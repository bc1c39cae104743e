import { SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { keyCoveredByIdentity, type ReplicaIdentity, relationChange } from './identity.js';

const pk: ReplicaIdentity = { kind: 'default', columns: ['id'], index: 't_pkey' };
const byIndex: ReplicaIdentity = { kind: 'index', columns: ['a', 'b'], index: 't_ab' };
const full: ReplicaIdentity = { kind: 'full', columns: [], index: null };
const none: ReplicaIdentity = { kind: 'nothing', columns: [], index: null };

function refusal(identity: ReplicaIdentity, key: string[] | null): string {
  try {
    return `accepted ${JSON.stringify(keyCoveredByIdentity('t', identity, key))}`;
  } catch (err) {
    expect(SluiceError.hasCode(err, 'REPLICA_IDENTITY_MISSING')).toBe(true);
    return (err as Error).message;
  }
}

describe('keyCoveredByIdentity', () => {
  it('accepts keys the identity names in every update and delete', () => {
    expect(refusal(pk, null)).toBe('accepted ["id"]');
    expect(refusal(pk, ['id'])).toBe('accepted ["id"]');
    expect(refusal(byIndex, ['b', 'a'])).toBe('accepted ["b","a"]');
    expect(refusal(byIndex, ['a'])).toBe('accepted ["a"]');
    expect(refusal(full, ['anything'])).toBe('accepted ["anything"]');
  });

  it('refuses the rest, saying what to do', () => {
    expect(refusal(none, ['id'])).toMatch(/no primary key and no replica identity/);
    expect(refusal(pk, ['v'])).toMatch(
      /key \["v"\] .* primary key on \["id"\]\): .*REPLICA IDENTITY FULL, or key the endpoint on \["id"\]/,
    );
    expect(refusal(pk, ['id', 'v'])).toMatch(/would not name \["v"\]/);
    expect(refusal(byIndex, ['c'])).toMatch(/replica identity index "t_ab" on \["a", "b"\]/);
    expect(refusal(byIndex, null)).toMatch(
      /index "t_ab" on \["a", "b"\]: configure the source's "key" as \["a", "b"\]/,
    );
    expect(refusal(full, null)).toMatch(/REPLICA IDENTITY FULL: configure the source's "key"/);
  });
});

describe('relationChange', () => {
  it('names a dropped, a recreated and an unpublished table; null for the same one', () => {
    expect(relationChange('t', 7, { oid: 7, published: true }, true)).toBeNull();
    expect(relationChange('t', 7, { oid: 7, published: false }, false)).toBeNull();
    expect(relationChange('t', 7, null, true)).toMatch(/was dropped/);
    expect(relationChange('t', 7, { oid: 9, published: true }, true)).toMatch(
      /dropped and recreated \(relation 7 → 9\)/,
    );
    expect(relationChange('t', 7, { oid: 7, published: false }, true)).toMatch(
      /no longer in its publication/,
    );
  });
});
