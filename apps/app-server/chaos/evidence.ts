/** Evidence for a violation: what the nodes logged about the transfer, in time order, one compact line each. */
import { execFileSync } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChaosNode } from './cluster.js';

/** Log lines (pino JSON) of every life of every node that name the transfer, compacted to one line each. */
export function logsAbout(nodes: ChaosNode[], transferId: string, started: number): string[] {
  const lines: Array<{ at: number; text: string }> = [];
  for (const node of nodes)
    for (const { life, line } of node.logs) {
      if (!line.includes(transferId)) continue;
      lines.push(compactLine(node.id, life, line, started));
    }
  return lines.sort((a, b) => a.at - b.at).map((l) => l.text);
}

function levelName(level: unknown): string {
  return (
    (
      { 10: 'trace', 20: 'debug', 30: 'info', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' } as Record<string, string>
    )[String(level)] ?? String(level)
  );
}

/** One pino JSON line as `node#life +seconds level message {other fields}`; other output as it is. */
export function compactLine(
  node: string,
  life: number,
  line: string,
  started: number,
): { at: number; text: string } {
  try {
    const entry = JSON.parse(line) as Record<string, unknown>;
    const { time, level, msg, pid: _pid, hostname: _host, node: _node, transferId: _id, ...rest } = entry;
    // Stacks drown the sequence of events; the error's type and message stay.
    if (rest.err && typeof rest.err === 'object') delete (rest.err as Record<string, unknown>).stack;
    const at = typeof time === 'number' ? time : started;
    const extra = JSON.stringify(rest);
    const seconds = ((at - started) / 1000).toFixed(1);
    return {
      at,
      text: `${node}#${life} +${seconds}s ${levelName(level)} ${msg} ${extra === '{}' ? '' : extra.slice(0, 300)}`,
    };
  } catch {
    return { at: started, text: `${node}#${life} ${line.slice(0, 300)}` };
  }
}

/** The last lines of one life of a node, compacted: what it said before it crashed or hung. */
export function tailOf(node: ChaosNode, life: number, count: number, started: number): string[] {
  return node.logs
    .filter((l) => l.life === life)
    .slice(-count)
    .map((l) => compactLine(node.id, life, l.line, started).text);
}

/**
 * Which code ran: the commit and how many tracked files differed from it. Other engineers change the product while
 * this runs, so a violation is only evidence together with the code it was seen on.
 */
export function codeVersion(): string {
  const cwd = dirname(fileURLToPath(import.meta.url));
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], {
      cwd,
      encoding: 'utf8',
    })
      .split('\n')
      .filter((l) => l.trim() !== '').length;
    return dirty === 0 ? commit : `${commit} + uncommitted changes in ${dirty} tracked files`;
  } catch {
    return 'unknown (not a git checkout)';
  }
}
