// The replication connection of one ReplicationStream (stream.ts), on a thread of its own.
//
// Why a thread: PostgreSQL ends a replication connection that has not heard from its client for
// `wal_sender_timeout` (60 s by default). The main thread of an app-server stops for as long as a cache commit
// of a big source transaction takes (an LMDB write transaction is synchronous), and also for garbage collection
// and the other endpoints' work: a connection answered from there was dropped mid-transaction and its transaction
// read again from its start, every time. Here the socket is read and answered whatever the main thread does.
//
// Plain JavaScript (no build step): the same file runs from the sources (tests) and from the published package.
//
// Protocol (see stream.ts, which owns the meaning of what passes):
//   workerData: { url, slot, publication, startLsn, ackLsn, keepaliveMs, highWater, applicationName }
//   → main:  { kind: 'batch', bytes: ArrayBuffer, entries: [kind 'w' | 'k', lsn, start, end][] }
//              ('w' = an XLogData payload, the pgoutput message in bytes[start, end); 'k' = a primary keepalive),
//            { kind: 'started' } (PostgreSQL accepted START_REPLICATION: the slot is this connection's),
//            { kind: 'failed', message }, { kind: 'closed' }
//   ← main:  { kind: 'ack', lsn } (the LSN to report as flushed, already one byte back: the library adds one),
//            { kind: 'consumed', count } (messages taken so far: backpressure), { kind: 'close' }
import { parentPort, workerData } from 'node:worker_threads';
import replication from 'pg-logical-replication';

const { LogicalReplicationService } = replication;
const options = workerData;

/** Messages sent in one batch at most (a batch is also sent at the end of each event-loop turn). */
const BATCH = 1000;

let ackLsn = options.ackLsn;
let sent = 0;
let consumed = 0;
let paused = false;
let closed = false;
/** @type {Array<{ kind: 'w' | 'k', lsn: string, payload: Buffer | null }>} */
let pending = [];
let flushScheduled = false;
/** @type {NodeJS.Timeout[]} */
const timers = [];

const service = new LogicalReplicationService(
  {
    connectionString: options.url,
    connectionTimeoutMillis: 10_000,
    application_name: options.applicationName,
  },
  // Acknowledgements are the main thread's to decide (only what the cache committed is ever confirmed).
  { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
);

/** Reports `ackLsn` as flushed; `ping` asks the server for a keepalive (an idle slot advances through it). */
function status(ping) {
  if (closed) return;
  void service.acknowledge(ackLsn, ping).catch(() => {});
}

function flush() {
  flushScheduled = false;
  if (pending.length === 0 || closed) return;
  const items = pending;
  pending = [];
  let total = 0;
  for (const item of items) if (item.payload !== null) total += item.payload.length;
  // Not from Buffer's shared pool: the whole ArrayBuffer is transferred to the main thread.
  const bytes = Buffer.allocUnsafeSlow(total);
  const entries = [];
  let offset = 0;
  for (const item of items) {
    if (item.payload === null) {
      entries.push([item.kind, item.lsn, 0, 0]);
      continue;
    }
    item.payload.copy(bytes, offset);
    entries.push([item.kind, item.lsn, offset, offset + item.payload.length]);
    offset += item.payload.length;
  }
  sent += items.length;
  parentPort.postMessage({ kind: 'batch', bytes: bytes.buffer, entries }, [bytes.buffer]);
  // Past `highWater` messages not yet taken by the main thread, stop reading the socket (PostgreSQL then waits);
  // the status updates below keep the connection alive meanwhile.
  if (!paused && sent - consumed >= options.highWater) setPaused(true);
}

function push(item) {
  if (closed) return;
  pending.push(item);
  if (pending.length >= BATCH) flush();
  else if (!flushScheduled) {
    flushScheduled = true;
    setImmediate(flush);
  }
}

function setPaused(value) {
  paused = value;
  // The socket of the library's pg connection (the one its own flow control pauses).
  const socket = service._connection?.stream;
  if (value) socket?.pause();
  else socket?.resume();
}

function fail(message) {
  if (closed) return;
  flush();
  closed = true;
  for (const timer of timers) clearInterval(timer);
  parentPort.postMessage({ kind: 'failed', message });
}

// Copied now: the payload is a view into the connection's read buffer, which the next socket read overwrites.
service.on('data', (lsn, payload) => push({ kind: 'w', lsn, payload: Buffer.from(payload) }));
service.on('heartbeat', (lsn, _time, shouldRespond) => {
  push({ kind: 'k', lsn, payload: null });
  if (shouldRespond) status(false);
});
service.on('error', (err) => fail(err instanceof Error ? err.message : String(err)));
// The server's CopyBothResponse to START_REPLICATION: from here the slot is streamed by this connection.
service.on('start', () => {
  if (!closed) parentPort.postMessage({ kind: 'started' });
});

/** pgoutput, started after reading the server's `wal_sender_timeout`; messages pass on as bytes (parsed by the main thread). */
const plugin = {
  parse: (buffer) => buffer,
  async start(client, slot, lsn) {
    const result = await client.query(
      "SELECT setting::int AS ms FROM pg_settings WHERE name = 'wal_sender_timeout'",
    );
    const timeoutMs = Number(result.rows[0]?.ms ?? 0);
    timers.push(setInterval(() => status(true), options.keepaliveMs));
    // A status update well within the server's timeout even while the socket is paused (no keepalive read then).
    if (timeoutMs > 0 && timeoutMs / 3 < options.keepaliveMs)
      timers.push(setInterval(() => status(false), Math.max(50, Math.floor(timeoutMs / 3))));
    const publication = options.publication.replace(/'/g, "''");
    return client.query(
      `START_REPLICATION SLOT "${slot.replace(/"/g, '""')}" LOGICAL ${lsn} (proto_version '1', publication_names '${publication}')`,
    );
  },
};

parentPort.on('message', (message) => {
  switch (message.kind) {
    case 'ack':
      ackLsn = message.lsn;
      status(false);
      break;
    case 'consumed':
      consumed = message.count;
      if (paused && sent - consumed <= options.highWater / 2) setPaused(false);
      break;
    case 'close':
      closed = true;
      for (const timer of timers) clearInterval(timer);
      service
        .destroy()
        .catch(() => {})
        .finally(() => {
          parentPort.postMessage({ kind: 'closed' });
          parentPort.close();
        });
      break;
    default:
      break;
  }
});

service.subscribe(plugin, options.slot, options.startLsn).then(
  () => fail('the replication stream ended'),
  (err) => fail(err instanceof Error ? err.message : String(err)),
);
