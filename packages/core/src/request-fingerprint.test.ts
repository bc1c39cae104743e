import { describe, expect, it } from 'vitest';
import { hashJson } from './json.js';
import { matchesStoredRequest, normalizeTransferRequest, requestHash } from './request-fingerprint.js';
import { parseTransferRequest } from './transfer.js';

const FILE = { type: 'file', path: '/data/in.jsonl' };
const PG_DESTINATION = { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' };
const hashOf = (body: unknown) => requestHash(parseTransferRequest(body));

describe('requestHash: one fingerprint per meaning', () => {
  it('defect: a one-column key as a string and as a list, follow: false and capture "poll" spelled out, hashed differently', () => {
    const base = { id: 'fp', source: FILE, destination: PG_DESTINATION };
    const spellings = {
      keyList: { ...base, destination: { ...PG_DESTINATION, key: ['id'] } },
      sourceFollowFalse: { ...base, source: { ...FILE, follow: false } },
      optionsFollowFalse: { ...base, options: { follow: false } },
    };
    const answers = Object.fromEntries(
      Object.entries(spellings).map(([name, body]) => [name, hashOf(body) === hashOf(base)]),
    );
    expect(answers).toEqual({ keyList: true, sourceFollowFalse: true, optionsFollowFalse: true });

    const table = { type: 'postgres', connection: 'wh', table: 'src', key: ['id'] };
    const toFile = { id: 'fp2', source: table, destination: { type: 'file', path: '/out/x.jsonl' } };
    expect(hashOf({ ...toFile, source: { ...table, key: 'id', capture: 'poll' } })).toBe(hashOf(toFile));

    const stream = { type: 'jetstream', stream: 'S', subject: 'a.b', key: 'id' };
    const toStream = { id: 'fp3', source: FILE, destination: stream };
    expect(hashOf({ ...toStream, destination: { ...stream, key: ['id'] } })).toBe(hashOf(toStream));
  });

  it('keeps apart what means something else', () => {
    const base = { id: 'fp', source: FILE, destination: PG_DESTINATION };
    const table = { type: 'postgres', connection: 'wh', table: 'src', key: 'id' };
    const others = [
      { ...base, destination: { ...PG_DESTINATION, key: ['id', 'region'] } },
      { ...base, destination: { ...PG_DESTINATION, key: undefined } },
      { ...base, source: { ...FILE, follow: true } },
      // A destination's `capture` is refused later (request-rules); it must not vanish from the fingerprint first.
      { ...base, destination: { ...PG_DESTINATION, capture: 'poll' } },
      { ...base, source: { ...table, capture: 'replication' } },
      { ...base, source: table },
    ];
    const hashes = others.map(hashOf);
    for (const hash of hashes) expect(hash).not.toBe(hashOf(base));
    expect(new Set(hashes).size).toBe(others.length);
    expect(hashOf({ ...base, source: { ...table, capture: 'poll' } })).not.toBe(
      hashOf({ ...base, source: { ...table, capture: 'replication' } }),
    );
  });

  it('is the hash the request had before normalizing when it is already normalized (records stored earlier match on their hash)', () => {
    const request = parseTransferRequest({
      id: 'fp',
      source: FILE,
      destination: { ...PG_DESTINATION, key: ['id'] },
      options: { maxRecordsPerSecond: 5 },
    });
    expect(requestHash(request)).toBe(hashJson(request));
  });

  it('normalizes without changing its argument', () => {
    const request = parseTransferRequest({
      id: 'fp',
      source: { ...FILE, follow: false },
      destination: PG_DESTINATION,
    });
    const before = JSON.stringify(request);
    const normalized = normalizeTransferRequest(request);
    expect(JSON.stringify(request)).toBe(before);
    expect(normalized.source).toEqual({ type: 'file', path: '/data/in.jsonl', format: 'jsonl' });
    expect(normalized.destination).toMatchObject({ key: ['id'] });
  });
});

describe('matchesStoredRequest', () => {
  const written = { id: 'old', source: FILE, destination: PG_DESTINATION };
  // What an earlier version stored: the hash of the parsed request as written.
  const stored = {
    requestHash: hashJson(parseTransferRequest(written)),
    request: parseTransferRequest(written),
  };

  it('matches a record stored with the hash of its request as written, in every spelling', () => {
    expect(matchesStoredRequest(stored, hashOf(written))).toBe(true);
    expect(
      matchesStoredRequest(stored, hashOf({ ...written, destination: { ...PG_DESTINATION, key: ['id'] } })),
    ).toBe(true);
    expect(
      matchesStoredRequest(stored, hashOf({ ...written, destination: { ...PG_DESTINATION, table: 'x' } })),
    ).toBe(false);
  });

  it('counts defaults the schema gained since the record was stored as given', () => {
    // Stored before `options.onBadRecord` had its default: the stored request has no `options`.
    const { options: _options, properties: _properties, ...older } = parseTransferRequest(written);
    expect(matchesStoredRequest({ requestHash: hashJson(older), request: older }, hashOf(written))).toBe(
      true,
    );
  });

  it('answers "another request" for a stored request that is not an object, never throws', () => {
    expect(matchesStoredRequest({ requestHash: 'x', request: null }, hashOf(written))).toBe(false);
    expect(matchesStoredRequest({ requestHash: 'x', request: 'text' }, hashOf(written))).toBe(false);
    expect(
      matchesStoredRequest(
        { requestHash: 'x', request: { id: 'old', source: 7, options: null } },
        hashOf(written),
      ),
    ).toBe(false);
  });
});
