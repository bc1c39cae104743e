/**
 * A minimal core-NATS client speaking the text protocol over a socket: enough to ask the JetStream API
 * (`$JS.API.*`) for a stream's contents. The checker deliberately does not reuse the product's NATS code (or its
 * client library): what it reads from the stream must not pass through a layer under test.
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';

const CRLF = '\r\n';

interface Pending {
  resolve: (payload: Buffer) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class WireNats implements AsyncDisposable {
  readonly #socket: Socket;
  readonly #inbox = `_INBOX.chaos${randomBytes(6).toString('hex')}`;
  readonly #pending = new Map<string, Pending>();
  #buffer: Buffer = Buffer.alloc(0);
  #next = 0;
  #closed: Error | null = null;
  #ready: { resolve: () => void; reject: (err: Error) => void } | null = null;
  readonly #pongs: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];

  private constructor(socket: Socket) {
    this.#socket = socket;
  }

  /** Connects, subscribes to its reply inbox and waits for the server's PONG (the subscription is in place). */
  static async connect(port: number, timeoutMs = 5_000): Promise<WireNats> {
    const socket = connect({ port, host: '127.0.0.1', noDelay: true });
    const client = new WireNats(socket);
    const ready = new Promise<void>((resolve, reject) => {
      client.#ready = { resolve, reject };
    });
    const timer = setTimeout(
      () => client.#fail(new Error(`NATS on port ${port}: no PONG in ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.on('data', (chunk) => client.#onData(chunk));
    socket.on('error', (err) => client.#fail(err));
    socket.on('close', () => client.#fail(new Error('NATS connection closed')));
    try {
      await ready;
    } finally {
      clearTimeout(timer);
    }
    return client;
  }

  /** One request/reply; a "no responders" status or silence within `timeoutMs` rejects. */
  request(subject: string, payload: unknown, timeoutMs = 5_000): Promise<Buffer> {
    if (this.#closed) return Promise.reject(this.#closed);
    const reply = `${this.#inbox}.${++this.#next}`;
    const body = Buffer.from(payload === undefined ? '' : JSON.stringify(payload));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(reply);
        reject(new Error(`NATS request ${subject}: no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(reply, { resolve, reject, timer });
      // One write per request: three small ones meet Nagle and delayed ACKs (tens of ms per round trip).
      this.#socket.write(
        Buffer.concat([
          Buffer.from(`PUB ${subject} ${reply} ${body.length}${CRLF}`),
          body,
          Buffer.from(CRLF),
        ]),
      );
    });
  }

  /** A plain core-NATS publish, then a PING/PONG round trip so the server has processed it. */
  async publish(subject: string, payload: unknown): Promise<void> {
    const body = Buffer.from(JSON.stringify(payload));
    this.#socket.write(
      Buffer.concat([Buffer.from(`PUB ${subject} ${body.length}${CRLF}`), body, Buffer.from(CRLF)]),
    );
    await this.flush();
  }

  /** Resolves once the server answered a PING sent after everything written so far. */
  flush(): Promise<void> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise((resolve, reject) => {
      this.#pongs.push({ resolve, reject });
      this.#socket.write(`PING${CRLF}`);
    });
  }

  /** A JetStream API call: the JSON reply, or an error naming the API's own error description. */
  async api<T>(subject: string, payload?: unknown): Promise<T> {
    const reply = JSON.parse((await this.request(subject, payload)).toString('utf8')) as T & {
      error?: { code: number; description: string };
    };
    if (reply.error) throw new Error(`${subject}: ${reply.error.code} ${reply.error.description}`);
    return reply;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#fail(new Error('closed'));
    this.#socket.destroy();
  }

  #fail(err: Error) {
    if (this.#closed) return;
    this.#closed = err;
    this.#ready?.reject(err);
    for (const pending of this.#pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
    this.#pending.clear();
    for (const pong of this.#pongs.splice(0)) pong.reject(err);
    this.#socket.destroy();
  }

  #onData(chunk: Buffer) {
    this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
    for (;;) {
      const end = this.#buffer.indexOf(CRLF);
      if (end < 0) return;
      const line = this.#buffer.subarray(0, end).toString('utf8');
      const [op, ...args] = line.split(' ');
      if (op === 'MSG' || op === 'HMSG') {
        // MSG <subject> <sid> [reply] <bytes>; HMSG <subject> <sid> [reply] <header bytes> <total bytes>
        const total = Number(args[args.length - 1]);
        const headerBytes = op === 'HMSG' ? Number(args[args.length - 2]) : 0;
        if (this.#buffer.length < end + 2 + total + 2) return; // the payload has not fully arrived
        const start = end + 2;
        const headers = this.#buffer.subarray(start, start + headerBytes).toString('utf8');
        const payload = Buffer.from(this.#buffer.subarray(start + headerBytes, start + total));
        this.#buffer = this.#buffer.subarray(start + total + 2);
        this.#deliver(args[0]!, headers, payload);
        continue;
      }
      this.#buffer = this.#buffer.subarray(end + 2);
      if (op === 'INFO') {
        const connectOptions = {
          verbose: false,
          pedantic: false,
          headers: true,
          no_responders: true,
          protocol: 1,
        };
        this.#socket.write(
          `CONNECT ${JSON.stringify(connectOptions)}${CRLF}SUB ${this.#inbox}.* 1${CRLF}PING${CRLF}`,
        );
      } else if (op === 'PING') this.#socket.write(`PONG${CRLF}`);
      else if (op === 'PONG') {
        if (this.#ready) {
          this.#ready.resolve();
          this.#ready = null;
        } else this.#pongs.shift()?.resolve();
      } else if (op === '-ERR') this.#fail(new Error(`NATS: ${line}`));
    }
  }

  #deliver(subject: string, headers: string, payload: Buffer) {
    const pending = this.#pending.get(subject);
    if (!pending) return;
    this.#pending.delete(subject);
    clearTimeout(pending.timer);
    // A status line such as "NATS/1.0 503" with an empty body: nobody serves that subject.
    if (/^NATS\/1\.0 503/.test(headers)) pending.reject(new Error('NATS: no responders'));
    else pending.resolve(payload);
  }
}

/** What the checker needs of one stream: per-subject counts and the messages of one subject in order. */
export class StreamReader {
  constructor(
    private readonly nats: WireNats,
    private readonly stream: string,
  ) {}

  async create(subjects: string[]): Promise<void> {
    await this.nats.api(`$JS.API.STREAM.CREATE.${this.stream}`, {
      name: this.stream,
      subjects,
      storage: 'file',
      // The server's default, said out loud: the product's dedupe ids must be right inside this window.
      duplicate_window: 120_000_000_000,
    });
  }

  /** Messages stored per subject (the stream's own count, after its dedupe). */
  async subjectCounts(filter: string): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    let offset = 0;
    for (;;) {
      const info = await this.nats.api<{
        state: { subjects?: Record<string, number>; num_subjects?: number };
        total?: number;
      }>(`$JS.API.STREAM.INFO.${this.stream}`, { subjects_filter: filter, offset });
      const page = Object.entries(info.state.subjects ?? {});
      for (const [subject, count] of page) counts.set(subject, count);
      offset += page.length;
      if (page.length === 0 || offset >= (info.total ?? info.state.num_subjects ?? 0)) return counts;
    }
  }

  /** Every message of `subject`, in stream order, as parsed JSON. */
  async messages(subject: string): Promise<Array<{ seq: number; data: unknown }>> {
    const out: Array<{ seq: number; data: unknown }> = [];
    let seq = 1;
    for (;;) {
      let reply: { message: { seq: number; data?: string } };
      try {
        reply = await this.nats.api(`$JS.API.STREAM.MSG.GET.${this.stream}`, { seq, next_by_subj: subject });
      } catch (err) {
        if (/10037|no message found/i.test((err as Error).message)) return out;
        throw err;
      }
      const text = Buffer.from(reply.message.data ?? '', 'base64').toString('utf8');
      out.push({ seq: reply.message.seq, data: JSON.parse(text) });
      seq = reply.message.seq + 1;
    }
  }
}
