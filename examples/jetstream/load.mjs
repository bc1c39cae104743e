#!/usr/bin/env node
// Loads a JSONL file into the stream with an idempotent transfer on the app-server, and waits for it.
//   node load.mjs [file.jsonl]      (default: the GeoNames cities of the quick start)
// The transfer id is derived from the file's name and content: loading the same file again returns the stored
// outcome and publishes nothing; a changed file is a new transfer (its records upsert the endpoint). A load
// interrupted by a crash is resumed from its checkpoint and JetStream drops the re-published messages
// (Nats-Msg-Id = transfer id + record key), so every record is in the stream once.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { STREAM, streamMessages } from './stream.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const file = resolve(process.argv[2] ?? resolve(here, '../quickstart/data/cities.jsonl'));
const control = `http://127.0.0.1:${process.env.SLUICE_PORT || 7270}`;

if (!existsSync(file)) {
  console.error(
    `✖ ${file} does not exist (the default is written by \`node scripts/prepare-quickstart-data.mjs\`)`,
  );
  process.exit(1);
}

async function sha256(path) {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk);
  return hash.digest('hex');
}

async function call(method, path, body) {
  const response = await fetch(`${control}${path}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(30_000),
  }).catch((err) => {
    console.error(`✖ the app-server does not answer on ${control} (${err.message}); \`run.sh start\` first`);
    process.exit(1);
  });
  return { status: response.status, body: await response.json() };
}

const name = basename(file)
  .replace(/\.[^.]*$/, '')
  .replace(/[^A-Za-z0-9._-]/g, '-')
  .slice(0, 100);
const id = `load-${name}-${(await sha256(file)).slice(0, 16)}`;
const request = {
  id,
  mode: 'idempotent',
  source: { type: 'file', path: file, format: 'jsonl' },
  destination: { type: 'jetstream', stream: STREAM, subject: 'cities.upsert', key: ['id'] },
  properties: { loadedBy: 'examples/jetstream/load.mjs' },
};

const submitted = await call('POST', '/v1/transfers', request);
if (submitted.status === 200) {
  console.log(
    `▸ ${basename(file)} was already loaded by transfer ${id} (${submitted.body.state}): nothing published again`,
  );
} else if (submitted.status === 201 || submitted.status === 202) {
  console.log(
    `▸ transfer ${id}: ${submitted.status === 201 ? 'started' : `running on ${submitted.body.owner?.nodeId}`}`,
  );
} else {
  console.error(
    `✖ the transfer was refused: ${submitted.status} ${submitted.body.code}: ${submitted.body.detail}`,
  );
  process.exit(1);
}

let record = submitted.body;
while (!['COMPLETED', 'FAILED', 'TERMINATED'].includes(record.state)) {
  await new Promise((r) => setTimeout(r, 250));
  record = (await call('GET', `/v1/transfers/${id}`)).body;
}
if (record.state !== 'COMPLETED') {
  console.error(`✖ transfer ${id} ${record.state}: ${record.error?.code}: ${record.error?.message}`);
  process.exit(1);
}
const { recordsRead, recordsWritten, badRecords } = record.result;
console.log(
  `▸ transfer ${id} COMPLETED: ${recordsRead} records read, ${recordsWritten} published, ${badRecords} bad`,
);
console.log(`▸ stream ${STREAM} holds ${await streamMessages()} messages`);
