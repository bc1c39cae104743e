import { describe, expect, it } from 'vitest';
import { wrapCursor } from './cursor.js';
import { pageBody, pageFrame } from './page-body.js';

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

  it('frames a page as pageBody does, with the cursor wrapped for its generation', () => {
    const inner = 'eyJjIjoiaXRlbXMtMSJ9';
    for (const generation of ['items-1', 'items-2', 'items-1']) {
      const frame = pageFrame(generation);
      for (const next of [inner, null]) {
        const framed = `${frame.head}${records.toString('utf8')}${frame.tail(next)}`;
        expect(framed).toBe(pageBody(records, wrapCursor(generation, next)).toString('utf8'));
      }
    }
    expect(JSON.parse(`${pageFrame('items-2').head}[]${pageFrame('items-2').tail(inner)}`).next).toBe(
      wrapCursor('items-2', inner),
    );
  });
});
