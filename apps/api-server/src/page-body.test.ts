import { describe, expect, it } from 'vitest';
import { pageBody } from './page-body.js';

describe('pageBody', () => {
  const records = Buffer.from('[{"id":1,"name":"é"},{"id":2}]');

  it('is the records array with a null next', () => {
    const body = pageBody(records, null);
    expect(JSON.parse(body.toString('utf8'))).toEqual({
      records: [{ id: 1, name: 'é' }, { id: 2 }],
      next: null,
    });
    expect(body.length).toBe(Buffer.byteLength('{"records":,"next":null}') + records.length);
  });

  it('carries a cursor as a JSON string, exactly as long as needed', () => {
    const next = 'aXRlbXMtMQ.eyJjIjoiaXRlbXMtMSJ9';
    const body = pageBody(records, next);
    expect(body.toString('utf8')).toBe(`{"records":${records.toString('utf8')},"next":"${next}"}`);
  });

  it('escapes a cursor that is not plain base64url', () => {
    const next = 'a"b\\c\u00e9';
    expect(JSON.parse(pageBody(records, next).toString('utf8')).next).toBe(next);
  });
});
