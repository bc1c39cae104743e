/**
 * PostgreSQL values and the JSON values the pipeline must read them as, shared by the tests of the polled path
 * (`connectPostgres`), the logical-replication path (`textParser` on a column's text) and a child process that reads
 * them under another time zone (`fixtures/pg-values-child.ts`).
 */
import type { FieldType } from '@sluice/core';

/** One column: its type, a value of it, and what the pipeline reads. */
export interface PgValueCase {
  /** Column name (the table's and the query's). */
  name: string;
  /** Its SQL type, as a table column declares it. */
  type: string;
  /** A SQL expression of that type. */
  sql: string;
  /** The type OID a result or a relation message names, or null for types a database defines (enum). */
  oid: number | null;
  /** What the pipeline reads: a JSON value, never a `Date`, `Buffer` or driver object. */
  value: unknown;
  /** `fieldTypeOfPg` of the column: the endpoint schema's field type, which `value` must fit… */
  field: FieldType;
  /** …unless refused, as documented: numbers a double cannot hold stay text, which `integer`/`number` refuse. */
  refused?: true;
}

/** Types the cases use that a database must create first ({@link createPgValueTypes}). */
const TYPES_SQL = [
  `CREATE TYPE mood AS ENUM ('sad', 'ok')`,
  'CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)',
];

/**
 * Every value shape the pipeline reads from PostgreSQL. Text forms are PostgreSQL's defaults (`DateStyle` ISO,
 * `IntervalStyle` postgres, `bytea_output` hex, `lc_monetary` C, `TimeZone` UTC).
 */
export const PG_VALUE_CASES: PgValueCase[] = [
  { name: 'd', type: 'date', sql: `'2024-03-01'::date`, oid: 1082, value: '2024-03-01', field: 'string' },
  { name: 'd_inf', type: 'date', sql: `'infinity'::date`, oid: 1082, value: 'infinity', field: 'string' },
  {
    name: 'd_bc',
    type: 'date',
    sql: `'0044-03-15 BC'::date`,
    oid: 1082,
    value: '0044-03-15 BC',
    field: 'string',
  },
  {
    name: 'ts',
    type: 'timestamp',
    sql: `'2024-03-01 10:00:00.123456'::timestamp`,
    oid: 1114,
    value: '2024-03-01T10:00:00.123456',
    field: 'timestamp',
  },
  {
    name: 'tstz',
    type: 'timestamptz',
    sql: `'2024-03-01 10:00:00.123456+00'::timestamptz`,
    oid: 1184,
    value: '2024-03-01T10:00:00.123456+00:00',
    field: 'timestamp',
  },
  {
    name: 'ts_a',
    type: 'timestamp[]',
    sql: `ARRAY['2024-03-01 10:00:00.123456', 'infinity']::timestamp[]`,
    oid: 1115,
    value: ['2024-03-01T10:00:00.123456', 'infinity'],
    field: 'json',
  },
  {
    name: 'tstz_a',
    type: 'timestamptz[]',
    sql: `ARRAY['2024-03-01 10:00:00.123456+00', NULL]::timestamptz[]`,
    oid: 1185,
    value: ['2024-03-01T10:00:00.123456+00:00', null],
    field: 'json',
  },
  {
    name: 'd_a',
    type: 'date[]',
    sql: `ARRAY['2024-03-01', NULL, 'infinity', '0044-03-15 BC']::date[]`,
    oid: 1182,
    value: ['2024-03-01', null, 'infinity', '0044-03-15 BC'],
    field: 'json',
  },
  { name: 'b', type: 'bytea', sql: `'\\x0102ff'::bytea`, oid: 17, value: '\\x0102ff', field: 'string' },
  {
    name: 'b_a',
    type: 'bytea[]',
    sql: `ARRAY['\\x01'::bytea, '\\x'::bytea, NULL]`,
    oid: 1001,
    value: ['\\x01', '\\x', null],
    field: 'json',
  },
  {
    name: 'iv',
    type: 'interval',
    sql: `'1 day 02:03:04.5'::interval`,
    oid: 1186,
    value: '1 day 02:03:04.5',
    field: 'string',
  },
  {
    name: 'iv_a',
    type: 'interval[]',
    sql: `ARRAY['1 month'::interval, '-1.5 seconds']`,
    oid: 1187,
    value: ['1 mon', '-00:00:01.5'],
    field: 'json',
  },
  { name: 'pt', type: 'point', sql: 'point(1.5, -2)', oid: 600, value: { x: 1.5, y: -2 }, field: 'json' },
  {
    name: 'ci',
    type: 'circle',
    sql: `'<(1,2),3>'::circle`,
    oid: 718,
    value: { x: 1, y: 2, radius: 3 },
    field: 'json',
  },
  {
    name: 'pt_a',
    type: 'point[]',
    sql: 'ARRAY[point(1, 2)]',
    oid: 1017,
    value: [{ x: 1, y: 2 }],
    field: 'json',
  },
  {
    name: 't',
    type: 'time',
    sql: `'10:00:00.123456'::time`,
    oid: 1083,
    value: '10:00:00.123456',
    field: 'string',
  },
  {
    name: 'ttz',
    type: 'timetz',
    sql: `'10:00:00+05:30'::timetz`,
    oid: 1266,
    value: '10:00:00+05:30',
    field: 'string',
  },
  { name: 'm', type: 'money', sql: `'12.5'::money`, oid: 790, value: '$12.50', field: 'string' },
  {
    name: 'u',
    type: 'uuid',
    sql: `'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid`,
    oid: 2950,
    value: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    field: 'string',
  },
  { name: 'ip', type: 'inet', sql: `'10.0.0.1/8'::inet`, oid: 869, value: '10.0.0.1/8', field: 'string' },
  { name: 'ip_a', type: 'inet[]', sql: `ARRAY['::1'::inet]`, oid: 1041, value: ['::1'], field: 'json' },
  { name: 'mood', type: 'mood', sql: `'ok'::mood`, oid: null, value: 'ok', field: 'string' },
  { name: 'dom', type: 'posint', sql: '5::posint', oid: null, value: 5, field: 'integer' },
  { name: 'i8', type: 'int8', sql: '42::int8', oid: 20, value: 42, field: 'integer' },
  {
    name: 'i8_big',
    type: 'int8',
    sql: '9007199254740993::int8',
    oid: 20,
    value: '9007199254740993',
    field: 'integer',
    refused: true,
  },
  { name: 'num', type: 'numeric', sql: '10.50::numeric(10,2)', oid: 1700, value: 10.5, field: 'number' },
  { name: 'f8', type: 'float8', sql: '0.25::float8', oid: 701, value: 0.25, field: 'number' },
  {
    name: 'f8_nan',
    type: 'float8',
    sql: `'NaN'::float8`,
    oid: 701,
    value: 'NaN',
    field: 'number',
    refused: true,
  },
  {
    name: 'f4_inf',
    type: 'float4',
    sql: `'-Infinity'::float4`,
    oid: 700,
    value: '-Infinity',
    field: 'number',
    refused: true,
  },
  { name: 'i4_a', type: 'int4[]', sql: 'ARRAY[1, NULL, 3]', oid: 1007, value: [1, null, 3], field: 'json' },
  {
    name: 'i4_2d',
    type: 'int4[]',
    sql: 'ARRAY[[1, 2], [3, 4]]',
    oid: 1007,
    value: [
      [1, 2],
      [3, 4],
    ],
    field: 'json',
  },
  { name: 'i4_empty', type: 'int4[]', sql: `'{}'::int4[]`, oid: 1007, value: [], field: 'json' },
  {
    name: 'txt_a',
    type: 'text[]',
    sql: `ARRAY['a', 'b c', 'NULL', NULL, 'q"x\\', '']`,
    oid: 1009,
    value: ['a', 'b c', 'NULL', null, 'q"x\\', ''],
    field: 'json',
  },
  {
    name: 'jb_a',
    type: 'jsonb[]',
    sql: `ARRAY['{"a": "x,y"}'::jsonb, '[2]']`,
    oid: 3807,
    value: [{ a: 'x,y' }, [2]],
    field: 'json',
  },
  {
    name: 'i8_a',
    type: 'int8[]',
    sql: 'ARRAY[5, 9007199254740993]::int8[]',
    oid: 1016,
    value: [5, '9007199254740993'],
    field: 'json',
  },
  {
    name: 'num_a',
    type: 'numeric[]',
    sql: `ARRAY[10.50, 12345678901234567890, 'NaN']::numeric[]`,
    oid: 1231,
    value: [10.5, '12345678901234567890', 'NaN'],
    field: 'json',
  },
  {
    name: 'f8_a',
    type: 'float8[]',
    sql: `ARRAY[1.5, 'NaN', '-Infinity']::float8[]`,
    oid: 1022,
    value: [1.5, 'NaN', '-Infinity'],
    field: 'json',
  },
  {
    name: 'bool_a',
    type: 'bool[]',
    sql: 'ARRAY[true, false]',
    oid: 1000,
    value: [true, false],
    field: 'json',
  },
];

/**
 * Creates the types the cases use (an enum and a domain) through `run`, which runs one statement in the test's
 * database.
 *
 * @example
 * ```ts
 * await createPgValueTypes((statement) => client.query(statement));
 * ```
 */
export async function createPgValueTypes(run: (statement: string) => Promise<unknown>): Promise<void> {
  for (const statement of TYPES_SQL) await run(statement);
}

/** The cases an endpoint typed by its columns keeps (the refused ones would be bad records). */
export const ENDPOINT_CASES = PG_VALUE_CASES.filter((c) => !c.refused);

/** A table `pgvalues` with a column per endpoint case (and an `id` primary key). */
export const PG_VALUES_TABLE_SQL = `CREATE TABLE pgvalues (id int PRIMARY KEY, ${ENDPOINT_CASES.map(
  (c) => `${c.name} ${c.type}`,
).join(', ')})`;

/** Inserts row `id` of `pgvalues`: every endpoint case's value. */
export function insertPgValuesSql(id: number): string {
  return `INSERT INTO pgvalues SELECT ${id}, ${ENDPOINT_CASES.map((c) => c.sql).join(', ')}`;
}

/** One row of every case's value, columns named after the cases. */
export const PG_VALUES_SQL = `SELECT ${PG_VALUE_CASES.map((c) => `${c.sql} AS ${c.name}`).join(', ')}`;

/** One row of every case's value as PostgreSQL's text output (what pgoutput streams), columns named after the cases. */
export const PG_TEXTS_SQL = `SELECT ${PG_VALUE_CASES.map((c) => `(${c.sql})::text AS ${c.name}`).join(', ')}`;

/** Every case's expected value by column name (of `cases`: all by default). */
export function expectedPgValues(cases = PG_VALUE_CASES): Record<string, unknown> {
  return Object.fromEntries(cases.map((c) => [c.name, c.value]));
}
