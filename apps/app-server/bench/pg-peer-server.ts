/**
 * The peer of the PostgreSQL submit benchmark: what a user would write instead of Sluice's data plane — a fastify
 * route that stores the request idempotently with one `INSERT … ON CONFLICT (id) DO NOTHING` (and reads the stored
 * row back on a conflict), on the same PostgreSQL, with a pool as large as the node's. Nothing runs the transfer.
 * argv: port, database URL.
 */
import Fastify from 'fastify';
import pg from 'pg';

const [port, url] = [Number(process.argv[2]), process.argv[3]];
const pool = new pg.Pool({ connectionString: url, max: 10 });
await pool.query(`CREATE TABLE IF NOT EXISTS bench_peer_transfers (
  id text PRIMARY KEY,
  request jsonb NOT NULL,
  state text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
)`);

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.post('/transfers', async (request, reply) => {
  const body = request.body as { id: string };
  const inserted = await pool.query(
    `INSERT INTO bench_peer_transfers (id, request, state) VALUES ($1, $2, 'IN_PROGRESS')
     ON CONFLICT (id) DO NOTHING RETURNING id, request, state`,
    [body.id, body],
  );
  if (inserted.rows.length === 1) return reply.code(201).send(inserted.rows[0]);
  const stored = await pool.query('SELECT id, request, state FROM bench_peer_transfers WHERE id = $1', [
    body.id,
  ]);
  return reply.code(200).send(stored.rows[0]);
});
app.addHook('onClose', () => pool.end());
await app.listen({ host: '127.0.0.1', port });
console.log('pg peer ready');
