/**
 * Peers of the change-feed benchmark, each its own process, pushing the same load as the Sluice writer
 * (`perCommit` records every `everyMs`, each carrying `value` = the instant it was produced, ms):
 *   change-peers.ts sse <port> <perCommit> <everyMs>            a bare node:http SSE server fanning out to its clients
 *   change-peers.ts nats <natsUrl> <subject> <perCommit> <everyMs>   a NATS publisher (subscribers fan out via nats-server)
 * Both print `peer ready`, start producing at SIGUSR2 and stop at SIGTERM.
 */
import { createServer, type ServerResponse } from 'node:http';
import { connect } from '@nats-io/transport-node';

const [mode, ...args] = process.argv.slice(2);

function record(id: number): string {
  return JSON.stringify({
    key: [id],
    record: { id, gen: 1, value: Date.now(), category: 'a', tags: [] },
  });
}

async function main(): Promise<void> {
  let producing: NodeJS.Timeout | null = null;
  let id = 0;
  if (mode === 'sse') {
    const [portText, perCommitText, everyText] = args;
    const perCommit = Number(perCommitText);
    const clients = new Set<ServerResponse>();
    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      req.socket.setNoDelay(true);
      res.write(': hello\n\n');
      clients.add(res);
      res.on('close', () => clients.delete(res));
    });
    await new Promise<void>((resolve) => server.listen(Number(portText), '127.0.0.1', resolve));
    process.on('SIGUSR2', () => {
      producing ??= setInterval(() => {
        let text = '';
        for (let k = 0; k < perCommit; k += 1) {
          id += 1;
          text += `id: ${id}\nevent: upsert\ndata: ${record(id % 1000)}\n\n`;
        }
        text += `id: ${id}\nevent: commit\ndata: {"position":null}\n\n`;
        for (const client of clients) client.write(text);
      }, Number(everyText));
    });
    console.log('peer ready');
    process.on('SIGTERM', () => {
      if (producing) clearInterval(producing);
      for (const client of clients) client.destroy();
      server.close(() => process.exit(0));
    });
    return;
  }
  const [url, subject, perCommitText, everyText] = args;
  const nc = await connect({ servers: url! });
  const perCommit = Number(perCommitText);
  process.on('SIGUSR2', () => {
    producing ??= setInterval(() => {
      for (let k = 0; k < perCommit; k += 1) {
        id += 1;
        nc.publish(subject!, record(id % 1000));
      }
    }, Number(everyText));
  });
  console.log('peer ready');
  process.on('SIGTERM', () => {
    if (producing) clearInterval(producing);
    void nc.drain().then(() => process.exit(0));
  });
}

void main();
