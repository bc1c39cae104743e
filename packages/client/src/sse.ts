/** One parsed Server-Sent Event. */
export interface SseMessage {
  event: string;
  data: string;
  /** The `id` field, when the event had one. */
  id?: string;
}

/**
 * Parses a `text/event-stream` body (WHATWG rules: `field: value` lines, blank line ends an event, `:` comments,
 * CR/LF/CRLF line ends) into events. Works on any `ReadableStream<Uint8Array>` (fetch in Node 20+ and browsers).
 *
 * @example
 * ```ts
 * for await (const message of readEventStream(response.body)) console.log(message.event, message.data);
 * ```
 */
export async function* readEventStream(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | undefined;
  let sawField = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      // At the end, a trailing CR is a whole line end (no LF can follow any more).
      if (done && !buffer.endsWith('\r')) return;
      buffer += done ? '\n' : decoder.decode(value, { stream: true });
      let start = 0;
      for (;;) {
        const lf = buffer.indexOf('\n', start);
        const cr = buffer.indexOf('\r', start);
        let end = lf;
        if (cr >= 0 && (lf < 0 || cr < lf)) end = cr;
        if (end < 0) break;
        // A CR at the very end may be the first half of CRLF: wait for more input.
        if (end === cr && end === buffer.length - 1) break;
        const line = buffer.slice(start, end);
        start = end + (end === cr && buffer[end + 1] === '\n' ? 2 : 1);
        if (line === '') {
          if (sawField)
            yield { event: event || 'message', data: data.join('\n'), ...(id !== undefined ? { id } : {}) };
          event = '';
          data = [];
          id = undefined;
          sawField = false;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id') id = value;
        else continue;
        sawField = true;
      }
      buffer = buffer.slice(start);
      if (done) return;
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}
