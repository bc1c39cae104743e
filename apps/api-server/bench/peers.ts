/**
 * Peer servers for the benchmark, run as child processes (like the api-server itself):
 *   peers.ts bare <port> <pageJson>     bare fastify routes returning a fixed record / page of records (the limit)
 *   peers.ts pg <port> <postgresUrl>    fastify + pg answering the same lookups and range queries
 */
import Fastify from 'fastify';
import pg from 'pg';

const [mode, portText, arg] = process.argv.slice(2);
const port = Number(portText);

async function main(): Promise<void> {
  const app = Fastify({ logger: false });
  if (mode === 'bare') {
    const records = JSON.parse(arg!) as Array<Record<string, unknown>>;
    const record = records[0]!;
    const page = { records, next: 'x' };
    app.get('/records/:key', async () => record);
    app.post('/query', async () => page);
  } else {
    const pool = new pg.Pool({ connectionString: arg, max: 16 });
    app.get<{ Params: { key: string } }>('/records/:key', async (request, reply) => {
      const id = Number(request.params.key);
      const { rows } = await pool.query({
        name: 'get',
        text: 'SELECT id, gen, value, category, tags FROM items WHERE id = $1',
        values: [id],
      });
      if (rows.length === 0) return reply.code(404).send({ code: 'RECORD_NOT_FOUND' });
      return rows[0];
    });
    app.post<{ Body: { from: number } }>('/query', async (request) => {
      const { rows } = await pool.query({
        name: 'range',
        text: 'SELECT id, gen, value, category, tags FROM items WHERE value >= $1 ORDER BY value LIMIT 50',
        values: [request.body.from],
      });
      return { records: rows, next: null };
    });
    app.addHook('onClose', async () => pool.end());
  }
  await app.listen({ port, host: '127.0.0.1' });
  console.log(`peer listening ${mode} ${port}`);
  process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
}

void main();
