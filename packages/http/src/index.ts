export { allowedMethods } from './allowed-methods.js';
export {
  expiredTokenError,
  isExpiredJwt,
  jwtExpiry,
  MAX_BEARER_LENGTH,
  MAX_NUMERIC_DATE,
  parseBearer,
} from './bearer.js';
export {
  type CliFlags,
  ExitCode,
  FORCED_EXIT_MARGIN_MS,
  formatCliError,
  type RunCliOptions,
  type Running,
  runCli,
} from './cli.js';
export {
  addressClient,
  ClientSlots,
  StreamAdmission,
  type StreamAdmissionOptions,
  StreamBound,
  tokenClient,
} from './client-slots.js';
export { type LoadConfigOptions, type LoadedConfig, loadConfig } from './config.js';
export { DataDirAccess, prepareDataDir } from './data-dir.js';
export { ShutdownDrain } from './drain.js';
export { EVENT_STREAM_HEADERS, startEventStream } from './event-stream.js';
export { atExpiry } from './expiry.js';
export {
  headerLinesProblem,
  repeatedSingleHeader,
  SINGLE_HEADERS,
  unmetExpectation,
} from './header-lines.js';
export {
  JSON_MEDIA_TYPES,
  jsonBodyText,
  refusedContentEncoding,
  refusedJsonCharset,
} from './json-body.js';
export { listenError } from './listen-error.js';
export { type CreateLoggerOptions, createLogger, type LogLevel } from './logger.js';
export { EMPTY_BODY_MESSAGE, type NormalizeContext, normalizeHttpError } from './normalize.js';
export { refuseNullBody } from './null-body.js';
export {
  MAX_INSTANCE_LENGTH,
  PROBLEM_HTTP_OPTIONS,
  type ProblemDetailsOptions,
  problemClientErrors,
  problemDetailsPlugin,
  problemFrameworkErrors,
  problemInstance,
} from './problem-details.js';
export { queryParametersProblem, repeatedQueryParameter } from './query-params.js';
