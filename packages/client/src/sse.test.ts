import { describe, expect, it } from 'vitest';
import { readEventStream, type SseMessage } from './sse.js';

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function collect(chunks: string[]): Promise<SseMessage[]> {
  const out: SseMessage[] = [];
  for await (const message of readEventStream(streamOf(chunks))) out.push(message);
  return out;
}

describe('readEventStream', () => {
  it('parses ids, event names, multi-line data and skips comments and retry', async () => {
    expect(
      await collect([
        'retry: 1000\n\n: heartbeat\n\nid: t1\nevent: upsert\ndata: {"a":1}\n\ndata: x\ndata: y\n\n',
      ]),
    ).toEqual([
      { event: 'upsert', data: '{"a":1}', id: 't1' },
      { event: 'message', data: 'x\ny' },
    ]);
  });

  it('handles events split across chunks anywhere, including inside a CRLF and a multi-byte character', async () => {
    const text = 'id: é1\r\nevent: commit\r\ndata: {"p":"ü"}\r\n\r\nevent: live\rdata: {}\r\r';
    const bytes = new TextEncoder().encode(text);
    for (let cut = 1; cut < bytes.length; cut += 1) {
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(bytes.slice(0, cut));
          controller.enqueue(bytes.slice(cut));
          controller.close();
        },
      });
      const out: SseMessage[] = [];
      for await (const message of readEventStream(stream)) out.push(message);
      expect(out, `cut at ${cut}`).toEqual([
        { event: 'commit', data: '{"p":"ü"}', id: 'é1' },
        { event: 'live', data: '{}' },
      ]);
    }
  });

  it('drops an incomplete last event (the connection broke mid-event)', async () => {
    expect(await collect(['event: upsert\ndata: {"a":1}\n\nevent: upsert\ndata: {"a'])).toEqual([
      { event: 'upsert', data: '{"a":1}' },
    ]);
  });
});
