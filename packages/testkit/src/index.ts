export { type Balancer, startBalancer } from './balancer.js';
export { CHROMIUM_PATH, chromiumLaunchOptions } from './browser.js';
export { MANUAL_CLOCK_START, ManualClock } from './clock.js';
export { expectSluiceError } from './errors.js';
export { firstNotReady, type HttpAnswer, httpCall, httpGet } from './http-answer.js';
export {
  answerViolations,
  BodyFraming,
  deepJson,
  describeRawRequest,
  type FuzzRoute,
  HOSTILE_CONTENT_TYPES,
  HOSTILE_JSON_VALUES,
  HOSTILE_KEYS,
  type HostileContext,
  type HostileRequest,
  hostileQuery,
  hostileRequest,
  hostileSegment,
  jsonPathText,
  jsonWithHostileValue,
  malformedBearer,
  OUTAGE_CODES,
  type RawAnswer,
  type RawRequest,
  sendRawRequest,
} from './http-fuzz.js';
export { startItemsWriter } from './items-writer.js';
export { signJwt, signJwtPayload } from './jwt.js';
export {
  type CapturingLogger,
  capturingLogger,
  LOG_LEVELS,
  type LogEntry,
  type LogLevel,
} from './logger.js';
export {
  type LogicalPostgresHandle,
  type LogicalPostgresOptions,
  postgresBinDir,
  startLogicalPostgres,
} from './logical-postgres.js';
export { type NatsServerHandle, natsServerBinary, startNatsServer } from './nats.js';
export { freeBasePort, freePort, portOpen } from './ports.js';
export {
  createTestDatabase,
  perKeyWriteMismatches,
  sql,
  type TestDatabase,
  testPostgresUrl,
} from './postgres.js';
export {
  type ChildHandle,
  type ExitInfo,
  type SpawnOptions,
  spawnProcess,
  spawnTs,
  spawnTsWithoutFileCapabilities,
  spawnWithoutFileCapabilities,
  tsxLoaderPath,
} from './process.js';
export {
  heapObjectCounts,
  heapSnapshotNodeOptions,
  type ProcessResources,
  processResources,
} from './process-resources.js';
export { type SeededRandom, seededRandom } from './random.js';
export { openStalledUpload, rawHttpExchange, type StalledUpload } from './raw-http.js';
export { type TakenSlot, takeReplicationSlot } from './slot-taker.js';
export {
  type SourceTransaction,
  type SourceWriter,
  type SourceWriterOptions,
  startSourceWriter,
} from './source-writer.js';
export { startTcpProxy, type TcpProxy } from './tcp-proxy.js';
export { type TempDir, tempDir } from './temp.js';
export { sleep, waitFor } from './wait.js';
