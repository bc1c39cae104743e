// What the quick start prints: bold and red only on a terminal, numbers and paths as a reader wants them, and the
// one way it gives up (`fail`: a red ✖ line, its details, exit 1).
import { relative } from 'node:path';

export const tty = Boolean(process.stdout.isTTY);
export const bold = (text) => (tty ? `\x1b[1m${text}\x1b[22m` : text);
export const red = (text) => (tty ? `\x1b[31m${text}\x1b[39m` : text);
export const number = (n) => n.toLocaleString('en-US');
/** A path as the user should read it: relative to where they are when it is inside, else absolute. */
export const shown = (path) => {
  const rel = relative(process.cwd(), path);
  return rel === '' ? '.' : rel.startsWith('..') ? path : rel;
};
export const say = (line = '') => process.stdout.write(`${line}\n`);

export function fail(message, details = []) {
  process.stderr.write(`${red('✖')} ${message}\n`);
  for (const line of details) process.stderr.write(`  ${line}\n`);
  process.exit(1);
}
