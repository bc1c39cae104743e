/**
 * TypeScript types of endpoints' records from their schemas, as an api-server describes them (`GET /v1/endpoints`):
 * what `sluice-client types` writes, so a program's row types are the serving schema's rather than hand-kept
 * copies that drift from it. Pure text generation: runs anywhere.
 */
import type { CacheSchema, FieldType } from '@sluice/core';

/** An endpoint as `GET /v1/endpoints` lists it (the parts the types need). */
export interface DescribedEndpoint {
  name: string;
  schema: Pick<CacheSchema, 'fields' | 'primaryKey'>;
}

/** What a field of each type holds in a served record (timestamps are ISO 8601 text on the wire). */
const TS_TYPE: Record<FieldType, string> = {
  integer: 'number',
  number: 'number',
  string: 'string',
  boolean: 'boolean',
  timestamp: 'string',
  json: 'JsonValue',
};

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** Text inside a `/** … *\/` comment: a field name holding `*\/` would end the comment early. */
function commentText(text: string): string {
  return text.replaceAll('*/', '*\\/');
}

/** A property key as TypeScript source: bare when it is an identifier, else quoted. */
function propertyKey(name: string): string {
  return IDENTIFIER.test(name) ? name : JSON.stringify(name);
}

/** `order-items` → `OrderItems`; a name not starting with a letter gets an `Endpoint` prefix. */
function typeName(endpoint: string, taken: Set<string>): string {
  const words = endpoint.split(/[^A-Za-z0-9]+/).filter((w) => w !== '');
  let name = words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join('');
  if (!/^[A-Za-z]/.test(name)) name = `Endpoint${name}`;
  let unique = name;
  for (let n = 2; taken.has(unique) || unique === 'Endpoints' || unique === 'JsonValue'; n++)
    unique = `${name}${n}`;
  taken.add(unique);
  return unique;
}

/**
 * TypeScript source declaring one row type per endpoint and an `Endpoints` map (endpoint name → row type) for
 * `createClient<Endpoints>(…)`. Primary-key fields are required; every other field is optional and may be null
 * (a record may lack a field its schema lists — one added to the source later, an optional property of JSON
 * input — and a PostgreSQL NULL is null).
 *
 * @example
 * ```ts
 * endpointTypesSource([{ name: 'cities', schema: { fields: { id: 'integer', name: 'string' }, primaryKey: ['id'] } }]);
 * // export type Cities = { id: number; name?: string | null };
 * // export interface Endpoints { cities: Cities }
 * ```
 */
export function endpointTypesSource(endpoints: readonly DescribedEndpoint[], header?: string): string {
  const sorted = [...endpoints].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const taken = new Set<string>();
  const lines: string[] = [];
  if (header !== undefined) lines.push(...header.split('\n').map((line) => `// ${line}`.trimEnd()), '');
  lines.push(
    '/** A value of a `json` field. */',
    'export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };',
    '',
  );
  const names: Array<[endpoint: string, type: string]> = [];
  for (const endpoint of sorted) {
    const type = typeName(endpoint.name, taken);
    names.push([endpoint.name, type]);
    const key = new Set(endpoint.schema.primaryKey);
    lines.push(
      `/** A record of endpoint \`${endpoint.name}\` (primary key: ${commentText(endpoint.schema.primaryKey.join(', '))}). */`,
    );
    lines.push(`export type ${type} = {`);
    const fields = Object.entries(endpoint.schema.fields).sort(([a], [b]) => {
      // Key fields first, in key order; then the rest by name.
      const ka = endpoint.schema.primaryKey.indexOf(a);
      const kb = endpoint.schema.primaryKey.indexOf(b);
      if (ka >= 0 || kb >= 0) return (ka < 0 ? Infinity : ka) - (kb < 0 ? Infinity : kb);
      return a < b ? -1 : a > b ? 1 : 0;
    });
    for (const [field, fieldType] of fields) {
      const ts = TS_TYPE[fieldType] ?? 'JsonValue';
      lines.push(
        key.has(field) ? `  ${propertyKey(field)}: ${ts};` : `  ${propertyKey(field)}?: ${ts} | null;`,
      );
    }
    lines.push('};', '');
  }
  lines.push('/** Endpoint name → its record type: `createClient<Endpoints>({ queryUrl })`. */');
  lines.push('export interface Endpoints {');
  for (const [endpoint, type] of names) lines.push(`  ${propertyKey(endpoint)}: ${type};`);
  lines.push('}', '');
  return lines.join('\n');
}
