/**
 * Mistakes a new user makes in a first `sluice.yaml`, as the app-server (a real process) reports them: a misspelt
 * key, a required key left out, a SQLite store below a file. Each must exit 1 with a `CONFIG_INVALID` message
 * that names the key and says what to change, not what zod or the file system saw.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN } from './helpers.js';

async function run(yaml: string, args: string[]) {
  await using dir = await tempDir('sluice-first-mistakes-');
  await writeFile(join(dir.path, 'afile'), 'not a directory\n');
  const file = join(dir.path, 'sluice.yaml');
  await writeFile(file, yaml);
  await using child = spawnTs(BIN, ['--config', file, ...args], { cwd: dir.path });
  const exit = await child.exited;
  return { code: exit.code, output: child.output(), dir: dir.path };
}

const ENDPOINT = '    source: { type: file, path: /tmp/cities.jsonl }\n    primaryKey: [id]\n';

describe('configuration mistakes of a first sluice.yaml', () => {
  it('defect: a misspelt key was refused without suggesting the key it resembles', async () => {
    const { code, output } = await run(
      `pipline: { batchSize: 10 }\nendpoints:\n  - name: cities\n${ENDPOINT}    indexs: [[name]]\n`,
      ['--check'],
    );
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('pipline: Unrecognized key: "pipline"; did you mean "pipeline"?');
    expect(output).toContain('endpoints[0].indexs: Unrecognized key: "indexs"; did you mean "indexes"?');
    // A key like no known one gets no guess.
    const far = await run('node: { id: n1, colour: blue }\n', ['--check']);
    expect(far.code).toBe(1);
    expect(far.output).toMatch(/^ {2}node\.colour: Unrecognized key: "colour"$/m);
    expect(far.output).not.toContain('did you mean');
  }, 60_000);

  it('defect: a required key left out said "expected array, received undefined" instead of that it is required', async () => {
    const { code, output } = await run(
      'endpoints:\n  - name: cities\n    source: { type: file, path: /tmp/cities.jsonl }\n',
      ['--check'],
    );
    expect(code).toBe(1);
    expect(output).toContain('CONFIG_INVALID');
    expect(output).toContain('endpoints[0].primaryKey: is required (expected array)');
    expect(output).not.toContain('received undefined');
    // A value of the wrong type is still reported as one.
    const wrong = await run(`endpoints:\n  - name: cities\n${ENDPOINT.replace('[id]', 'id')}`, ['--check']);
    expect(wrong.code).toBe(1);
    expect(wrong.output).toContain('endpoints[0].primaryKey: Invalid input: expected array, received string');
  }, 60_000);

  it('defect: a files.roots entry that is a file (or below one) was accepted, and every transfer under it refused later', async () => {
    for (const root of ['./afile', './afile/out']) {
      for (const args of [['--check'], []]) {
        const { code, output, dir } = await run(
          `node: { id: r1, port: 0 }\napi: { port: 0 }\nfiles: { roots: [./not-yet, "${root}"] }\nlogLevel: silent\n`,
          args,
        );
        expect(code).toBe(1);
        expect(output).toBe(
          `sluice-app-server: CONFIG_INVALID: files.roots[1]: ${join(dir, root.slice(2))} cannot be a file root: ${join(dir, 'afile')} is a file, not a directory; point files.roots (SLUICE_FILE_ROOTS) at directories`,
        );
      }
    }
    // A root that does not exist yet is fine: a transfer writing into it creates it.
    const later = await run('files: { roots: [./not-yet] }\n', ['--check']);
    expect(later.code).toBe(0);
  }, 60_000);

  it('defect: a SQLite store below a file failed with STORE_UNAVAILABLE and an EEXIST from mkdir', async () => {
    const { code, output, dir } = await run(
      'node: { id: s1, port: 0 }\napi: { port: 0 }\nstore: "sqlite:./afile/store.db"\nlogLevel: silent\n',
      [],
    );
    expect(code).toBe(1);
    expect(output).not.toContain('EEXIST');
    expect(output).toBe(
      `sluice-app-server: CONFIG_INVALID: store: ${join(dir, 'afile', 'store.db')} cannot be used: ${join(dir, 'afile')} is a file, in the way of the store's directory; point store (SLUICE_STORE_URL) at a path in a directory`,
    );
  }, 60_000);
});
