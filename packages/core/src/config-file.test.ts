import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfigFile, parseConfigText } from './config-file.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-config-file-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const failure = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err as { code?: string; message: string; errors?: { path: string }[] };
  }
  throw new Error('expected a failure');
};

describe('loadConfigFile', () => {
  it('reads --config, else ./sluice.yaml, else the embedded defaults; a relative dataDir resolves against cwd', () => {
    const dir = tempDir();
    const defaults = loadConfigFile({ cwd: dir });
    expect(defaults.path).toBeNull();
    expect(defaults.dataDir).toBe(join(dir, '.sluice'));

    writeFileSync(join(dir, 'sluice.yaml'), 'node: { id: h7 }\ndataDir: ./data\n');
    const found = loadConfigFile({ cwd: dir });
    expect(found.path).toBe(join(dir, 'sluice.yaml'));
    expect(found.config.node.id).toBe('h7');
    expect(found.dataDir).toBe(join(dir, 'data'));

    writeFileSync(join(dir, 'other.yaml'), 'node: { id: h8 }\n');
    expect(loadConfigFile({ cwd: dir, configPath: 'other.yaml' }).config.node.id).toBe('h8');
    expect(loadConfigFile({ cwd: dir, env: { SLUICE_NODE_ID: 'h9' } }).config.node.id).toBe('h9');
  });

  it('a missing file, invalid YAML, a non-mapping or a bad value is CONFIG_INVALID naming where', () => {
    const dir = tempDir();
    expect(failure(() => loadConfigFile({ cwd: dir, configPath: 'missing.yaml' }))).toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('Cannot read configuration file'),
    });
    writeFileSync(join(dir, 'sluice.yaml'), 'node:\n  id: h1\n  id: h2\n');
    expect(failure(() => loadConfigFile({ cwd: dir })).message).toMatch(/not valid YAML at line 3, column 3/);
    writeFileSync(join(dir, 'sluice.yaml'), '- a\n- b\n');
    expect(failure(() => loadConfigFile({ cwd: dir })).message).toMatch(/must be a YAML mapping/);
    writeFileSync(join(dir, 'sluice.yaml'), 'api: { port: -1 }\n');
    const invalid = failure(() => loadConfigFile({ cwd: dir }));
    expect(invalid.code).toBe('CONFIG_INVALID');
    expect(invalid.errors?.map((e) => e.path)).toEqual(['api.port']);
    expect(invalid.message).toMatch(/^Invalid configuration in sluice\.yaml:\n {2}api\.port: /);
  });

  it('refuses a file larger than 4 MiB without parsing it', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'sluice.yaml'), `# ${'x'.repeat(4 * 1024 * 1024)}\n`);
    expect(failure(() => loadConfigFile({ cwd: dir })).message).toMatch(/larger than 4194304 bytes/);
  });

  it('parseConfigText limits YAML aliases (a billion-laughs document is refused)', () => {
    const bomb = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]'];
    for (let i = 1; i < 12; i++)
      bomb.push(
        `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(96 + i)}`)
          .join(',')}]`,
      );
    expect(failure(() => parseConfigText(bomb.join('\n')))).toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/alias/i),
    });
  });
});
