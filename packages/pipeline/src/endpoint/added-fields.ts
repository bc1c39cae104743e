/**
 * Fields a source's records gain while an endpoint run writes a generation — a column added to a replicated table
 * without a default, which the generation continues through (every row already there holds NULL, which is what a
 * record without the field reads as) — become fields of that generation, so queries can name them.
 */
import type { FieldType, Logger, WritableCache } from '@sluice/core';
import { setOwnField } from '../own.js';
import { queryableFields } from '../schema.js';
import type { SourceBranch } from '../types.js';
import type { EndpointShape } from './shape.js';

/** What a run tells of a branch's source's declared field types (`runPipeline`'s option `fieldTypes`). */
export type FieldTypesListener = (branch: SourceBranch, declared: Record<string, FieldType>) => void;

/**
 * The listener that adds to `cache`'s schema each field the source declares and the generation lacks, typed as a
 * fresh generation would type it: the source's declared type carried through the branch's processors (a column
 * `select` leaves out is no field; one it renames is added under its new name). `checked` — the field types the run
 * checks records against — grows with it, so a value of another type is a bad record, as in a fresh generation.
 * Nothing is ever removed or retyped here: such changes need a new generation, which the source asks for itself.
 *
 * Undefined (nothing is added) when the endpoint configures its `fields` — they are the operator's schema, and a new
 * column is served in the records but not queryable until the operator lists it — or when the cache cannot grow.
 *
 * @example
 * ```ts
 * const checked = { ...cache.schema.fields };
 * runPipeline({ …, fields: checked, fieldTypes: addedFieldsListener(shape, cache, checked, logger) });
 * ```
 */
export function addedFieldsListener(
  shape: EndpointShape,
  cache: WritableCache,
  checked: Record<string, FieldType>,
  logger: Logger,
): FieldTypesListener | undefined {
  if (shape.endpoint.fields !== undefined || cache.addFields === undefined) return undefined;
  return (branch, declared) => {
    let fields = declared;
    for (const processor of branch.processors) {
      // A processor that computes fields: their types are not known from the source's.
      if (processor.mapFields === undefined) return;
      fields = processor.mapFields(fields);
    }
    const current = cache.schema.fields;
    // A column the query language cannot name (`$x`, `constructor`) is served in the records, never a field.
    const added = Object.entries(queryableFields(fields)).filter(([name]) => !Object.hasOwn(current, name));
    if (added.length === 0) return;
    const addition = Object.fromEntries(added);
    cache.addFields?.(addition);
    for (const [name, type] of added) setOwnField(checked, name, type);
    logger.info(
      { endpoint: shape.name, cache: cache.name, fields: addition },
      'the source added fields: they are fields of the generation from its next commit',
    );
  };
}
