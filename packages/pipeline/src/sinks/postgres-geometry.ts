/**
 * Geometric values back into PostgreSQL's text. The pipeline reads `point` as `{x, y}` and `circle` as
 * `{x, y, radius}` (pg-parsers.ts, the node-pg driver's shapes, which endpoints serve), but PostgreSQL's input
 * functions take only their own text (`(1.5,-2)`, `<(0,0),3>`): the sink's `json_populate_recordset` handed them the
 * object's JSON text and every such row was refused. Other spellings (a string from a file source) pass unchanged.
 */

/** Turns one record value for a column into what PostgreSQL's input function of that column takes. */
export type ColumnValueWriter = (value: unknown) => unknown;

const POINT = 600;
const CIRCLE = 718;
const POINT_ARRAY = 1017;
const CIRCLE_ARRAY = 719;

const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** An object with finite numeric `x` and `y`: a point as the pipeline reads it. */
function asPoint(value: unknown): { x: number; y: number } | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const { x, y } = value as { x?: unknown; y?: unknown };
  return isNumber(x) && isNumber(y) ? { x, y } : null;
}

const pointText = (value: unknown): unknown => {
  const p = asPoint(value);
  return p === null ? value : `(${p.x},${p.y})`;
};

const circleText = (value: unknown): unknown => {
  const p = asPoint(value);
  const radius = (value as { radius?: unknown } | null)?.radius;
  return p === null || !isNumber(radius) ? value : `<(${p.x},${p.y}),${radius}>`;
};

/** Each element of a (possibly multidimensional) JSON array through `element`; anything else unchanged. */
const eachElement =
  (element: ColumnValueWriter): ColumnValueWriter =>
  (value) =>
    Array.isArray(value)
      ? value.map((v) => (Array.isArray(v) ? eachElement(element)(v) : element(v)))
      : value;

const WRITERS: Record<number, ColumnValueWriter> = {
  [POINT]: pointText,
  [CIRCLE]: circleText,
  [POINT_ARRAY]: eachElement(pointText),
  [CIRCLE_ARRAY]: eachElement(circleText),
};

/**
 * The writer of a column of PostgreSQL type `typeOid`, or null when its values go to PostgreSQL as they are.
 *
 * @example
 * ```ts
 * columnValueWriter(600)?.({ x: 1.5, y: -2 }); // '(1.5,-2)'
 * columnValueWriter(718)?.({ x: 0, y: 0, radius: 3 }); // '<(0,0),3>'
 * columnValueWriter(25); // null (text)
 * ```
 */
export function columnValueWriter(typeOid: number): ColumnValueWriter | null {
  return WRITERS[typeOid] ?? null;
}
