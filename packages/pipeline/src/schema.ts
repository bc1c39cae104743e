import { type FieldType, isQueryableFieldName } from '@sluice/core';
import type { Row } from './ops.js';
import { ownField, setOwnField } from './own.js';

const INTEGER = /^[-+]?\d+$/;
const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** Why a value does not fit a field type, or `null` when it does. */
export function typeMismatch(value: unknown, type: FieldType): string | null {
  if (value === null || value === undefined) return null;
  switch (type) {
    case 'string':
      return typeof value === 'string' ? null : `expected a string, got ${describe(value)}`;
    case 'integer':
      return typeof value === 'number' && Number.isSafeInteger(value)
        ? null
        : `expected an integer, got ${describe(value)}`;
    case 'number':
      return typeof value === 'number' && Number.isFinite(value)
        ? null
        : `expected a number, got ${describe(value)}`;
    case 'boolean':
      return typeof value === 'boolean' ? null : `expected a boolean, got ${describe(value)}`;
    case 'timestamp':
      return (typeof value === 'string' && ISO_TIMESTAMP.test(value) && !Number.isNaN(Date.parse(value))) ||
        (typeof value === 'number' && Number.isFinite(value))
        ? null
        : `expected an ISO timestamp, got ${describe(value)}`;
    case 'json':
      return null;
  }
}

function describe(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return `${Array.isArray(value) ? 'array' : typeof value} ${text.length > 40 ? `${text.slice(0, 40)}…` : text}`;
}

/** Checks every typed field of a record; returns the first problem or `null`. */
export function checkRecord(record: Row, fields: Record<string, FieldType>): string | null {
  for (const name in fields) {
    const problem = typeMismatch(ownField(record, name), fields[name]!);
    if (problem !== null) return `field "${name}": ${problem}`;
  }
  return null;
}

/**
 * Converts one CSV cell to its field type. An empty cell is `null`. Throws a message (string) when the
 * text does not parse as the type.
 */
export function convertCsvCell(text: string, type: FieldType | undefined): unknown {
  if (type === undefined || type === 'string') return text;
  if (text === '') return null;
  switch (type) {
    case 'integer': {
      const value = Number(text);
      if (!INTEGER.test(text) || !Number.isSafeInteger(value))
        throw `expected an integer, got "${clip(text)}"`;
      return value;
    }
    case 'number': {
      const value = Number(text);
      if (!NUMBER.test(text) || !Number.isFinite(value)) throw `expected a number, got "${clip(text)}"`;
      return value;
    }
    case 'boolean':
      if (text === 'true' || text === 'TRUE' || text === '1') return true;
      if (text === 'false' || text === 'FALSE' || text === '0') return false;
      throw `expected a boolean, got "${clip(text)}"`;
    case 'timestamp':
      if (!ISO_TIMESTAMP.test(text) || Number.isNaN(Date.parse(text)))
        throw `expected an ISO timestamp, got "${clip(text)}"`;
      return text;
    case 'json':
      try {
        return JSON.parse(text);
      } catch {
        throw `expected JSON, got "${clip(text)}"`;
      }
  }
}

function clip(text: string): string {
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

/** The narrowest type of a JSON value. */
function typeOfValue(value: unknown): FieldType | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isSafeInteger(value) ? 'integer' : 'number';
  if (typeof value === 'string') return 'string';
  return 'json';
}

function widen(a: FieldType | undefined, b: FieldType): FieldType {
  if (a === undefined || a === b) return b;
  if ((a === 'integer' && b === 'number') || (a === 'number' && b === 'integer')) return 'number';
  return 'json';
}

/**
 * Infers field types from sample records: a field seen only with integers is `integer`, integers and
 * fractions `number`, mixed kinds `json`. Fields that are always null are `json`.
 *
 * @example
 * ```ts
 * inferFields([{ id: 1, v: 2.5 }, { id: 2, v: 3 }]); // { id: 'integer', v: 'number' }
 * ```
 */
export function inferFields(records: Iterable<Row>): Record<string, FieldType> {
  const fields: Record<string, FieldType> = {};
  const seen = new Set<string>();
  for (const record of records) {
    for (const name of Object.keys(record)) {
      seen.add(name);
      const type = typeOfValue(record[name]);
      if (type !== null) setOwnField(fields, name, widen(ownField(fields, name), type));
    }
  }
  for (const name of seen) if (!Object.hasOwn(fields, name)) setOwnField(fields, name, 'json');
  return fields;
}

/** Infers CSV column types from sample rows of text: integer, number, boolean, else string. */
export function inferCsvFields(header: string[], rows: string[][]): Record<string, FieldType> {
  const fields: Record<string, FieldType> = {};
  header.forEach((name, i) => {
    let type: FieldType | undefined;
    for (const row of rows) {
      const text = row[i];
      if (text === undefined || text === '') continue;
      const cell: FieldType =
        INTEGER.test(text) && Number.isSafeInteger(Number(text))
          ? 'integer'
          : NUMBER.test(text)
            ? 'number'
            : text === 'true' || text === 'false'
              ? 'boolean'
              : 'string';
      type =
        type === undefined
          ? cell
          : type === cell
            ? type
            : widen(type, cell) === 'number'
              ? 'number'
              : 'string';
    }
    setOwnField(fields, name, type ?? 'string');
  });
  return fields;
}

/**
 * The fields of `fields` the query language can name (core's `isQueryableFieldName`): what a cache schema may
 * declare. A source column the query language cannot address — `$x` reads as an operator, `constructor` and
 * `__proto__` are reserved — is still carried in every record and served as it is; it is only not queryable (a
 * query naming it is refused by name). Declaring it refused the whole schema, so such a table was never mirrored.
 *
 * @example
 * ```ts
 * queryableFields({ id: 'integer', $x: 'string', constructor: 'integer' }); // { id: 'integer' }
 * ```
 */
export function queryableFields(fields: Readonly<Record<string, FieldType>>): Record<string, FieldType> {
  const out: Record<string, FieldType> = {};
  for (const name of Object.keys(fields))
    if (isQueryableFieldName(name)) setOwnField(out, name, fields[name]!);
  return out;
}
