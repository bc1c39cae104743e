import { describe, expect, it } from 'vitest';
import * as core from './index.js';

/**
 * The runtime exports other packages import. Removing or renaming one breaks them, so this list may only
 * grow: a failure here means an export went missing.
 */
const PUBLIC_RUNTIME_EXPORTS = [
  'ACTIVE_STATES',
  'ALL_STATES',
  'AliasRedirectedSchema',
  'BackplaneUnavailableError',
  'BadRecordError',
  'BadRecordPolicy',
  'COMPARISON_OPERATORS',
  'CacheClosedError',
  'CacheConflictError',
  'CacheNotFoundError',
  'CacheReadOnlyError',
  'ConfigError',
  'ConnectionConfigSchema',
  'ControlAuthSchema',
  'CursorExpiredError',
  'DEFAULT_QUERY_LIMITS',
  'DESTINATION_TYPES',
  'DestinationAddressSchema',
  'DiskFullError',
  'ENV_OVERRIDES',
  'EndpointAddressSchema',
  'EndpointConfigSchema',
  'ErrorCode',
  'FORBIDDEN_KEYS',
  'FieldType',
  'FieldTypeSchema',
  'FileAddressSchema',
  'FileFormat',
  'ForbiddenError',
  'IdempotencyConflictError',
  'IdempotencyKeyMismatchError',
  'IllegalTransitionError',
  'InternalError',
  'InvalidQueryError',
  'JetStreamAddressSchema',
  'JsonScalarSchema',
  'LimitsSchema',
  'MalformedJsonError',
  'NameSchema',
  'NatsConfigSchema',
  'NotFoundError',
  'PROBLEM_CONTENT_TYPE',
  'PathNotAllowedError',
  'PayloadTooLargeError',
  'PositionNotReachedError',
  'PostgresCapture',
  'PipelineCheckpointSchema',
  'PipelinePhase',
  'PostgresAddressSchema',
  'PropertiesSchema',
  'QueueFullError',
  'RecordNotFoundError',
  'ReplicaIdentityMissingError',
  'ReplicationNotEnabledError',
  'ReplicationNotPermittedError',
  'RestartDecision',
  'SOURCE_TYPES',
  'STATUS_BY_CODE',
  'SafeKeySchema',
  'SchemaMismatchError',
  'SinkError',
  'SluiceConfigSchema',
  'SluiceError',
  'SluiceEventSchema',
  'SnapshottingDoneSchema',
  'SourceAddressSchema',
  'SourceError',
  'SourceSchemaChangedError',
  'SqlIdentifierSchema',
  'StaleEpochError',
  'StoreUnavailableError',
  'TERMINAL_STATES',
  'TransferFailureSchema',
  'TransferIdSchema',
  'TransferMode',
  'TransferNotFoundError',
  'TransferOptionsSchema',
  'TransferRequestSchema',
  'TransferResultSchema',
  'TransferState',
  'TransferStateSchema',
  'TransferTerminatedError',
  'UnauthorizedError',
  'UnknownConnectionError',
  'UnknownEndpointError',
  'UnsupportedAddressTypeError',
  'UnsupportedMediaTypeError',
  'ValidationError',
  'aliasRedirected',
  'andFilters',
  'asSluiceError',
  'assertKnownAddressType',
  'canTransition',
  'canonicalJson',
  'compareScalars',
  'compileFilter',
  'filterSchema',
  'formatPath',
  'postgresCapture',
  'hashJson',
  'isTerminal',
  'issuesOf',
  'keyFields',
  'nextStates',
  'parseConfigOrThrow',
  'parseCountQuery',
  'parseFilter',
  'parseOrThrow',
  'parseQuery',
  'parseQueryOrThrow',
  'parseTransferRequest',
  'queryLimitsOf',
  'querySchema',
  'refuseProtoKey',
  'requestHash',
  'resolveConfig',
  'silentLogger',
  'snapshottingDone',
  'statusOf',
  'systemClock',
  'toProblem',
];

describe('@sluice/core public surface', () => {
  it('exports every public name', () => {
    const missing = PUBLIC_RUNTIME_EXPORTS.filter((name) => !(name in core));
    expect(missing).toEqual([]);
  });

  it('exports nothing undefined', () => {
    for (const [name, value] of Object.entries(core)) expect(value, name).toBeDefined();
  });

  it('exports every error class as a SluiceError subclass', () => {
    const errorClasses = Object.entries(core).filter(
      ([name, value]) => typeof value === 'function' && name.endsWith('Error') && name !== 'asSluiceError',
    );
    expect(errorClasses.length).toBeGreaterThanOrEqual(32);
    for (const [name, cls] of errorClasses) {
      expect(
        cls === core.SluiceError || (cls as { prototype: unknown }).prototype instanceof core.SluiceError,
        name,
      ).toBe(true);
    }
  });
});
