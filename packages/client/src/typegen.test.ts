import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { endpointTypesSource } from './typegen.js';

describe('endpointTypesSource', () => {
  it('types each field by its schema type; key fields required, the rest optional and nullable', () => {
    const source = endpointTypesSource([
      {
        name: 'order-items',
        schema: {
          fields: {
            note: 'string',
            id: 'integer',
            region: 'string',
            total: 'number',
            paid: 'boolean',
            at: 'timestamp',
            extra: 'json',
            'odd name': 'string',
          },
          primaryKey: ['region', 'id'],
        },
      },
      { name: 'cities', schema: { fields: { id: 'integer' }, primaryKey: ['id'] } },
    ]);
    expect(source).toContain(
      [
        'export type OrderItems = {',
        '  region: string;',
        '  id: number;',
        '  at?: string | null;',
        '  extra?: JsonValue | null;',
        '  note?: string | null;',
        '  "odd name"?: string | null;',
        '  paid?: boolean | null;',
        '  total?: number | null;',
        '};',
      ].join('\n'),
    );
    expect(source).toContain(
      ['export interface Endpoints {', '  cities: Cities;', '  "order-items": OrderItems;', '}'].join('\n'),
    );
  });

  it('gives clashing or non-identifier names distinct type names', () => {
    const source = endpointTypesSource([
      { name: 'a-b', schema: { fields: { id: 'integer' }, primaryKey: ['id'] } },
      { name: 'a_b', schema: { fields: { id: 'integer' }, primaryKey: ['id'] } },
      { name: '1st', schema: { fields: { id: 'integer' }, primaryKey: ['id'] } },
      { name: 'endpoints', schema: { fields: { id: 'integer' }, primaryKey: ['id'] } },
    ]);
    expect(source).toContain('  "a-b": AB;');
    expect(source).toContain('  a_b: AB2;');
    expect(source).toContain('  "1st": Endpoint1st;');
    expect(source).toContain('  endpoints: Endpoints2;');
  });

  it('defect: a primary-key field named with "*/" ended the doc comment early and the generated source did not parse', () => {
    const source = endpointTypesSource([
      { name: 'odd', schema: { fields: { 'a*/b': 'integer', v: 'string' }, primaryKey: ['a*/b'] } },
    ]);
    const parsed = ts.transpileModule(source, { reportDiagnostics: true, compilerOptions: { strict: true } });
    expect(parsed.diagnostics?.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))).toEqual([]);
    expect(source).toContain('  "a*/b": number;');
  });
});
