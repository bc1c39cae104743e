#!/usr/bin/env node
/**
 * Checks every changeset in .changeset/ the way `changeset version` will read it, so a broken one fails `pnpm lint`
 * instead of the release: front matter first (`---`, one `"<package>": patch|minor|major` line per package (either quotes), `---`),
 * every package named is one of the workspace's, and a summary follows. A markdown formatter once turned a front
 * matter into a `## "@sluice/core": minor` heading; nothing noticed until `changeset status` refused to run.
 *
 *   node scripts/check-changesets.mjs
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const dir = join(root, '.changeset');
// A YAML key: the package name in double or single quotes.
const BUMP_LINE = /^(["'])(@?[a-z0-9][a-z0-9._/-]*)\1:\s*(patch|minor|major)\s*$/;

const workspacePackages = new Set();
for (const parent of ['packages', 'apps']) {
  for (const name of readdirSync(join(root, parent))) {
    try {
      workspacePackages.add(JSON.parse(readFileSync(join(root, parent, name, 'package.json'), 'utf8')).name);
    } catch {
      // not a package directory
    }
  }
}

const problems = [];
const files = readdirSync(dir).filter((file) => file.endsWith('.md') && file !== 'README.md');
for (const file of files) {
  const lines = readFileSync(join(dir, file), 'utf8').split('\n');
  const fail = (message) => problems.push(`.changeset/${file}: ${message}`);
  if (lines[0] !== '---') {
    fail('must start with a front matter line "---"');
    continue;
  }
  const end = lines.indexOf('---', 1);
  if (end < 0) {
    fail('front matter is not closed with "---"');
    continue;
  }
  const bumps = lines.slice(1, end).filter((line) => line.trim() !== '');
  if (bumps.length === 0) fail('names no package');
  for (const line of bumps) {
    const match = BUMP_LINE.exec(line);
    if (!match) fail(`not a "<package>": patch|minor|major line: ${line}`);
    else if (!workspacePackages.has(match[2])) fail(`no workspace package is named ${match[2]}`);
  }
  const summary = lines.slice(end + 1).join('\n');
  if (summary.trim() === '') fail('has no summary');
}

if (problems.length > 0) {
  console.error(`${problems.length} broken changeset(s):\n${problems.join('\n')}`);
  process.exit(1);
}
console.log(`${files.length} changesets checked`);
