export { type ConnectionContext, sinkFor, sourceFor } from './addresses.js';
export {
  BadRecordCollector,
  type BadRecordPolicy,
  type BadRecordReport,
  MAX_BAD_RECORD_REPORTS,
} from './bad-records.js';
export { dagHash, decideRestart, nodeHandles, type RestartPlan } from './dag.js';
export { type EndpointSlotNames, endpointSlotNames } from './endpoint/generation-slots.js';
export { type EndpointContext, startEndpointPipeline } from './endpoint.js';
export { keyOf, keyString, type RecordLocation, type RecordOp, type Row } from './ops.js';
export { filterProcessor, functionProcessor, type RecordFunction, selectProcessor } from './processors.js';
export { ProgressTracker } from './progress.js';
export { type RunPipelineOptions, type RunPipelineResult, runPipeline } from './run.js';
export { checkRecord, convertCsvCell, inferCsvFields, inferFields, typeMismatch } from './schema.js';
export {
  announceRedirect,
  type CacheSink,
  type CacheSinkOptions,
  createCacheSink,
  createEndpointTransferSink,
  EndpointGenerationMovedError,
} from './sinks/cache.js';
export { createFileSink, type FileSinkOptions } from './sinks/file.js';
export { createJetStreamSink, type JetStreamSinkOptions } from './sinks/jetstream.js';
export { createPostgresSink, type PostgresSinkOptions, SINK_CHECKPOINT_TABLE } from './sinks/postgres.js';
export { formatCsvRecord, parseCsvRecord } from './sources/csv.js';
export { createFileSource, type FilePosition, type FileSourceOptions } from './sources/file.js';
export {
  createJetStreamSource,
  type JetStreamPosition,
  type JetStreamSourceOptions,
  OP_HEADER,
} from './sources/jetstream.js';
export {
  createPostgresSource,
  type PostgresPosition,
  type PostgresSourceOptions,
} from './sources/postgres.js';
export type { ReplicationLag } from './sources/replication/lag.js';
export { compareLsn, formatLsn, parseLsn } from './sources/replication/lsn.js';
export type { OwnedSlotMark, SlotOwner } from './sources/replication/ownership.js';
export type { ReplicationPosition } from './sources/replication/position.js';
export { defaultReplicationName, dropSlot } from './sources/replication/setup.js';
export {
  dropReplicationSlot,
  listReplicationSlots,
  type ReplicationSlotInfo,
} from './sources/replication/slots.js';
export { createReplicationSource, type ReplicationSourceOptions } from './sources/replication/source.js';
export { isReplicationSource, type ReplicationSource } from './sources/replication/status.js';
export { type SwitchFacts, switchHoldReason } from './switch-gate.js';
export {
  discardTransferLeftovers,
  holdTransferFence,
  runTransfer,
  type TransferContext,
  type TransferFenceHold,
  type TransferOutcome,
} from './transfer.js';
export type {
  PipelineProcessor,
  PipelineSink,
  PipelineSource,
  ReadOptions,
  ResumeCheck,
  RunMode,
  SnapshotDoneMark,
  SourceBatch,
  SourceBranch,
  SourceItem,
} from './types.js';
