/**
 * The processes under test: app-server nodes started from their CLI and a YAML file, exactly as an operator starts
 * them, and signalled as an operator's bad day would (SIGSTOP/SIGCONT, SIGKILL, SIGTERM). Each node keeps its id,
 * port and directory across lives, so a restart is the same member coming back.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ChildHandle, freePort, spawnProcess, spawnTs } from '@sluice/testkit';
import { tailOf } from './evidence.js';

const SOURCE_BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'bin.ts');

/** What a member of a cluster runs: a CLI's TypeScript entry and the line it prints once it is ready. */
export interface NodeProgram {
  /** The TypeScript entry (run through tsx when `ClusterSpec.bin` is `src`). */
  source: string;
  ready: RegExp;
}

/** The app-server, the default program of a cluster's nodes. */
export const APP_SERVER: NodeProgram = { source: SOURCE_BIN, ready: /app-server ready/ };

/** Timings short enough that leases expire and sweepers act many times within one run. */
export const CHAOS_TRANSFERS = {
  leaseMs: 2_000,
  heartbeatMs: 300,
  ownerWaitMs: 500,
  sweepIntervalMs: 300,
  shutdownGraceMs: 4_000,
  maxConcurrentTransfers: 8,
  queueSize: 200,
};

export type NodeState = 'up' | 'paused' | 'down' | 'starting' | 'stopping';

/** One output line of one life of a node, kept for evidence. */
export interface LogLine {
  node: string;
  life: number;
  line: string;
}

/** What the transfer chaos run's nodes share: their store, NATS, destination database and file root. */
export interface TransferNodesSpec {
  storeUrl: string;
  natsUrl: string;
  destUrl: string;
  fileRoot: string;
}

export interface ClusterSpec {
  dir: string;
  /** `src` (the program's TypeScript entry through tsx) or a path to a built `bin.js` of the program. */
  bin: string;
  nodes: number;
  /** Node ids, `n1`… unless given. */
  ids?: string[];
  /** What the nodes run (default: the app-server). */
  program?: NodeProgram;
  /** The YAML configuration file of one node, written once at creation. */
  config: (node: ChaosNode) => string;
  /** Date.now() at the start of the run: log times in evidence are relative to it. */
  started: number;
  /** Called when a node exits without having been told to (a crash of the product). */
  onUnexpectedExit: (node: ChaosNode, how: string, tail: string[]) => void;
}

export class ChaosNode {
  state: NodeState = 'down';
  life = 0;
  child: ChildHandle | null = null;
  /** Set before the driver signals an exit, so the exit handler can tell a crash from a kill. */
  expectingExit = false;
  readonly logs: LogLine[] = [];

  constructor(
    readonly id: string,
    readonly port: number,
    readonly dir: string,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
}

export class Cluster implements AsyncDisposable {
  readonly nodes: ChaosNode[];

  private constructor(
    private readonly spec: ClusterSpec,
    nodes: ChaosNode[],
  ) {
    this.nodes = nodes;
  }

  static async create(spec: ClusterSpec): Promise<Cluster> {
    const nodes: ChaosNode[] = [];
    for (let i = 1; i <= spec.nodes; i++) {
      const id = spec.ids?.[i - 1] ?? `n${i}`;
      const node = new ChaosNode(id, await freePort(), join(spec.dir, id));
      await mkdir(node.dir, { recursive: true });
      await writeFile(join(node.dir, 'sluice.yaml'), spec.config(node));
      nodes.push(node);
    }
    return new Cluster(spec, nodes);
  }

  /** The last lines one life of a node logged, compacted. */
  tail(node: ChaosNode, life: number, count: number): string[] {
    return tailOf(node, life, count, this.spec.started);
  }

  up(): ChaosNode[] {
    return this.nodes.filter((n) => n.state === 'up');
  }

  /** Starts one life of the node and waits until it says it is ready. */
  async start(node: ChaosNode): Promise<void> {
    if (node.state !== 'down') return;
    node.state = 'starting';
    node.expectingExit = false;
    node.life += 1;
    const life = node.life;
    const args = ['--config', join(node.dir, 'sluice.yaml')];
    const options = { cwd: node.dir, detached: true, maxLines: 500 };
    const program = this.spec.program ?? APP_SERVER;
    const child =
      this.spec.bin === 'src'
        ? spawnTs(program.source, args, options)
        : spawnProcess(process.execPath, [resolve(this.spec.bin), ...args], options);
    node.child = child;
    // Lines are copied out as they come: the child's own buffer is bounded, the evidence must not be.
    const copy = (stream: NodeJS.ReadableStream | null) => {
      let partial = '';
      stream?.on('data', (chunk: Buffer | string) => {
        const parts = (partial + chunk.toString()).split('\n');
        partial = parts.pop() ?? '';
        for (const line of parts) if (line !== '') node.logs.push({ node: node.id, life, line });
      });
    };
    copy(child.child.stdout);
    copy(child.child.stderr);
    void child.exited.then((info) => {
      if (node.child !== child) return;
      node.child = null;
      // An exit before "ready" is a failed start (start() reports it); after it, unasked, a crash.
      const crashed = !node.expectingExit && node.state !== 'starting';
      node.state = 'down';
      if (crashed) {
        const tail = this.tail(node, life, 15);
        this.spec.onUnexpectedExit(node, `exit code ${info.code ?? '-'} signal ${info.signal ?? '-'}`, tail);
      }
    });
    try {
      await child.waitForLine(program.ready, 90_000);
      if (node.child === child) node.state = 'up';
    } catch (err) {
      if (node.child === child) {
        node.expectingExit = true;
        child.kill('SIGKILL');
        await child.exited;
      }
      node.state = 'down';
      throw new Error(`${node.id} (life ${life}) did not start: ${(err as Error).message.slice(0, 2_000)}`);
    }
  }

  /** SIGKILL (also of a paused node: the kernel delivers it to a stopped process). */
  async kill(node: ChaosNode): Promise<void> {
    const child = node.child;
    if (!child) return;
    node.expectingExit = true;
    node.state = 'stopping';
    child.kill('SIGKILL');
    await child.exited;
  }

  /** SIGSTOP: the process freezes mid-whatever, its sockets stay open, its leases run out. */
  pause(node: ChaosNode): void {
    if (node.state !== 'up' || !node.child) return;
    node.child.kill('SIGSTOP');
    node.state = 'paused';
  }

  resume(node: ChaosNode): void {
    if (node.state !== 'paused' || !node.child) return;
    node.child.kill('SIGCONT');
    node.state = 'up';
  }

  /** SIGTERM, the graceful path: the node hands its transfers back. Resolves with how it ended. */
  async stopGracefully(node: ChaosNode, timeoutMs = 20_000): Promise<string> {
    const child = node.child;
    if (!child || node.state !== 'up') return 'not running';
    node.state = 'stopping';
    node.expectingExit = true;
    const info = await child.stop('SIGTERM', timeoutMs);
    return `exit code ${info.code ?? '-'} signal ${info.signal ?? '-'}`;
  }

  /**
   * Starts the node, again after a failed start (as a supervisor would): a node may refuse to start while, say,
   * nats-server is down. Each failed start is reported to `failed`.
   */
  async startRetrying(node: ChaosNode, failed: (message: string) => void, attempts = 10): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.start(node);
        return;
      } catch (err) {
        failed((err as Error).message);
        if (attempt >= attempts) throw err;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }

  /** Every node running and not frozen. */
  async heal(failed: (message: string) => void): Promise<void> {
    for (const node of this.nodes) this.resume(node);
    await Promise.all(this.nodes.filter((n) => n.state === 'down').map((n) => this.startRetrying(n, failed)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.allSettled(
      this.nodes.map(async (node) => {
        this.resume(node);
        if (node.state === 'up') await this.stopGracefully(node, 8_000);
        await this.kill(node);
      }),
    );
  }
}

/** The configuration of a node of the transfer chaos run. */
export function transferNodeYaml(spec: TransferNodesSpec, node: ChaosNode): string {
  const transfers = Object.entries(CHAOS_TRANSFERS).map(([key, value]) => `  ${key}: ${value}`);
  return [
    `node: { id: ${node.id}, port: ${node.port}, advertisedUrl: "http://127.0.0.1:${node.port}" }`,
    `store: "${spec.storeUrl}"`,
    `nats: "${spec.natsUrl}"`,
    `dataDir: "${join(node.dir, 'data')}"`,
    `files: { roots: [${JSON.stringify(spec.fileRoot)}] }`,
    // The destination database is named by the configuration, never by a request.
    'connections:',
    `  dest: { type: postgres, url: "${spec.destUrl}" }`,
    // Frequent commits: most faults land between two checkpoints of a running transfer.
    'pipeline: { commitEveryRecords: 10, commitEveryMs: 300 }',
    'logLevel: info',
    'transfers:',
    ...transfers,
    '',
  ].join('\n');
}
