import type { FieldType } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { keyOf } from './ops.js';
import { checkRecord, inferCsvFields, inferFields } from './schema.js';

// JSON.parse makes "__proto__" an own field, as a record read from JSON Lines has it.
const parse = (json: string) => JSON.parse(json) as Record<string, unknown>;

describe('fields named after Object.prototype members', () => {
  it('defect: keys, checks and inferred types read own fields only, never the prototype chain', () => {
    // A record without the key field has no key, rather than Object.prototype's member as its value.
    expect(keyOf({ id: 1 }, ['constructor'])).toBeUndefined();
    expect(keyOf({ id: 1 }, ['__proto__'])).toBeUndefined();
    expect(keyOf(parse('{"__proto__":7}'), ['__proto__'])).toEqual([7]);
    // An absent field is absent, not an object that fails its type.
    const fields = parse('{"__proto__":"string","constructor":"integer"}') as Record<string, FieldType>;
    expect(checkRecord({ id: 1 }, fields)).toBeNull();
    // Inferred types keep such fields as own fields.
    expect(Object.entries(inferFields([parse('{"__proto__":1,"constructor":"c"}')]))).toEqual([
      ['__proto__', 'integer'],
      ['constructor', 'string'],
    ]);
    expect(Object.entries(inferCsvFields(['__proto__', 'toString'], [['1', 'x']]))).toEqual([
      ['__proto__', 'integer'],
      ['toString', 'string'],
    ]);
  });
});
