import { readFileSync } from 'node:fs';
import { connect as connectTcp } from 'node:net';
import { join } from 'node:path';
import { freePort, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildApps } from '../src/build.js';
import { repoRoot } from '../src/paths.js';
import { runScript, sh } from '../src/shell.js';

// examples/jetstream as its README says: `run.sh start`, `run.sh load` (twice), the printed queries, `run.sh status`,
// `run.sh stop`. A private nats-server, free ports and a temporary data directory keep it apart from other runs.

interface City {
  id: number;
  name: string;
  country: string;
}

const script = join(repoRoot, 'examples/jetstream/run.sh');

/**
 * A raw core-NATS subscriber (the wire protocol over a socket; e2e has no NATS client): counts every message
 * published on `subject`, including those JetStream then drops as duplicates, so "nothing published" means
 * nothing was sent, not that the stream's dedupe window absorbed it.
 */
async function countPublishes(url: string, subject: string) {
  const { hostname, port } = new URL(url);
  const socket = connectTcp(Number(port), hostname);
  let count = 0;
  let buffer = Buffer.alloc(0);
  let skip = 0; // payload bytes (plus CRLF) still to drop
  let ready!: () => void;
  const subscribed = new Promise<void>((r) => {
    ready = r;
  });
  socket.on('data', (chunk: Buffer) => {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
      if (skip > 0) {
        const n = Math.min(skip, buffer.length);
        buffer = buffer.subarray(n);
        skip -= n;
        if (skip > 0) return;
      }
      const end = buffer.indexOf('\r\n');
      if (end < 0) return;
      const line = buffer.subarray(0, end).toString();
      buffer = buffer.subarray(end + 2);
      const words = line.split(' ');
      if (words[0] === 'PING') socket.write('PONG\r\n');
      else if (words[0] === 'PONG') ready();
      else if (words[0] === 'MSG' || words[0] === 'HMSG') {
        count++;
        skip = Number(words[words.length - 1]) + 2;
      }
    }
  });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write(
    `CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nSUB ${subject} 1\r\nPING\r\n`,
  );
  await subscribed;
  return {
    /** Messages seen so far, after a round trip (everything published before the call has arrived). */
    async count() {
      const pong = new Promise<void>((r) => {
        ready = r;
      });
      socket.write('PING\r\n');
      await pong;
      return count;
    },
    close: () => socket.destroy(),
  };
}
const TOTAL = 171_075;

describe('examples/jetstream (an endpoint fed from a stream, an idempotent load into it)', () => {
  beforeAll(() => buildApps(), 900_000);

  it('loads the file into the stream once, the endpoint serves it, a second load publishes nothing', async () => {
    await using nats = await startNatsServer();
    await using state = await tempDir('sluice-e2e-jetstream-');
    const env = {
      SLUICE_NATS_URL: nats.url,
      SLUICE_PORT: String(await freePort()),
      SLUICE_API_PORT: String(await freePort()),
      SLUICE_DATA_DIR: join(state.path, 'data'),
    };
    const run = (...args: string[]) => runScript(script, args, { cwd: repoRoot, env });
    const api = `http://127.0.0.1:${env.SLUICE_API_PORT}`;
    try {
      const started = await run('start');
      expect(started.code, `${started.stdout}\n${started.stderr}`).toBe(0);
      expect(started.stdout).toContain('created stream SLUICE_EXAMPLE_CITIES');
      const queries = started.stdout.split('\n').filter((line) => line.startsWith('curl '));
      expect(queries).toHaveLength(2);

      const publishes = await countPublishes(nats.url, 'cities.>');
      const first = await run('load');
      expect(first.code, `${first.stdout}\n${first.stderr}`).toBe(0);
      expect(first.stdout).toMatch(/transfer load-cities-[0-9a-f]{16}: started/);
      expect(first.stdout).toMatch(new RegExp(`COMPLETED: ${TOTAL} records read, ${TOTAL} published, 0 bad`));
      expect(first.stdout).toContain(`stream SLUICE_EXAMPLE_CITIES holds ${TOTAL} messages`);
      expect(await publishes.count()).toBe(TOTAL);

      // The endpoint follows the stream until it holds every record.
      await waitFor(
        async () => {
          const info = JSON.parse(await sh(`curl -s ${api}/v1/endpoints/cities`));
          return info.recordCount === TOTAL;
        },
        { timeoutMs: 180_000, intervalMs: 500, what: `the endpoint to serve ${TOTAL} records` },
      );
      const cities = readFileSync(join(repoRoot, 'examples/quickstart/data/cities.jsonl'), 'utf8')
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as City);
      const icelandic = cities.filter((c) => c.country === 'IS');
      const [countLine, queryLine] = queries;
      expect(JSON.parse(await sh(countLine!))).toEqual({ count: icelandic.length });
      expect(JSON.parse(await sh(queryLine!)).records).toEqual(
        icelandic.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id)).slice(0, 3),
      );

      // The same file again: the stored outcome, nothing published.
      const second = await run('load');
      expect(second.code, `${second.stdout}\n${second.stderr}`).toBe(0);
      expect(second.stdout).toMatch(/was already loaded by transfer load-cities-[0-9a-f]{16} \(COMPLETED\)/);
      expect(second.stdout).toContain(`stream SLUICE_EXAMPLE_CITIES holds ${TOTAL} messages`);
      // Nothing was sent at all (not merely deduplicated by the stream).
      expect(await publishes.count()).toBe(TOTAL);
      publishes.close();

      const status = await run('status');
      expect(status.code, status.stderr).toBe(0);
      expect(status.stdout).toMatch(new RegExp(`endpoint cities: ${TOTAL} records from cities-`));
    } finally {
      const stopped = await run('stop');
      expect(stopped.code, stopped.stderr).toBe(0);
    }
    expect((await run('status')).code).toBe(3);
  }, 900_000);
});
