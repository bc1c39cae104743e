/**
 * The peer of the benchmark: a bare fastify route that parses the same JSON body and answers 201 with a
 * body of the same shape, without a store, a backplane or a transfer behind it. Port from argv[2].
 */
import Fastify from 'fastify';

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.post('/bare', async (request, reply) => {
  const body = request.body as { id?: string; source?: unknown; destination?: unknown };
  return reply.code(201).send({
    id: body.id,
    mode: 'idempotent',
    state: 'IN_PROGRESS',
    owner: { nodeId: 'bare', address: 'http://127.0.0.1' },
    epoch: 1,
    attempts: 1,
    request: body,
  });
});
await app.listen({ host: '127.0.0.1', port: Number(process.argv[2]) });
console.log('bare server ready');
