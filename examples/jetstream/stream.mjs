#!/usr/bin/env node
// Creates the stream the "cities" endpoint follows, if it does not exist yet (idempotent).
//   node stream.mjs        (SLUICE_NATS_URL, default nats://127.0.0.1:4222)
import { connect, jetstreamManager } from './nats.mjs';

export const STREAM = 'SLUICE_EXAMPLE_CITIES';
export const SUBJECTS = ['cities.>'];
/** Publishes carry a dedupe id (transfer id + record key): a resumed load within this window duplicates nothing. */
const DUPLICATE_WINDOW_NS = 60 * 60 * 1e9;

export async function ensureStream(servers = process.env.SLUICE_NATS_URL || 'nats://127.0.0.1:4222') {
  const nc = await connect({ servers, name: 'sluice-jetstream-example' });
  try {
    const jsm = await jetstreamManager(nc);
    try {
      const info = await jsm.streams.info(STREAM);
      return { created: false, messages: info.state.messages };
    } catch (err) {
      if (!/not found/i.test(String(err?.message))) throw err;
    }
    await jsm.streams.add({ name: STREAM, subjects: SUBJECTS, duplicate_window: DUPLICATE_WINDOW_NS });
    return { created: true, messages: 0 };
  } finally {
    await nc.close();
  }
}

export async function streamMessages(servers = process.env.SLUICE_NATS_URL || 'nats://127.0.0.1:4222') {
  const nc = await connect({ servers, name: 'sluice-jetstream-example' });
  try {
    const jsm = await jetstreamManager(nc);
    return (await jsm.streams.info(STREAM)).state.messages;
  } finally {
    await nc.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { created, messages } = await ensureStream();
  console.log(
    created
      ? `▸ created stream ${STREAM} (subjects ${SUBJECTS.join(', ')})`
      : `▸ stream ${STREAM} exists (${messages} messages)`,
  );
}
