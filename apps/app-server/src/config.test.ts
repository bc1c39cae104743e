import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { backplaneKind, loadConfig, parseConfigText } from './config.js';

function configError(run: () => unknown): ConfigError {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig', () => {
  it('starts on embedded defaults with no file: SQLite, single-node backplane, cwd roots', async () => {
    const { config } = loadConfig({ env: {} });
    expect(config.store).toBe('sqlite:./.sluice/store.db');
    expect(config.node.id).toBe('local');
    expect(config.node.advertisedUrl).toBe('http://127.0.0.1:7070');
    expect(config.files.roots).toEqual([]);
    expect(backplaneKind(config)).toBe('single');
  });

  it('applies every environment override', async () => {
    const { config } = loadConfig({
      env: {
        SLUICE_NODE_ID: 'n7',
        SLUICE_PORT: '9123',
        SLUICE_ADVERTISED_URL: 'http://10.0.0.7:9123',
        SLUICE_STORE_URL: 'postgres://u@db:5432/s',
        SLUICE_NATS_URL: 'nats://127.0.0.1:4222',
        SLUICE_DATA_DIR: '/var/lib/sluice',
        SLUICE_FILE_ROOTS: '/data:/out',
      },
    });
    expect(config.node).toMatchObject({ id: 'n7', port: 9123, advertisedUrl: 'http://10.0.0.7:9123' });
    expect(config.store).toBe('postgres://u@db:5432/s');
    expect(config.nats).toBe('nats://127.0.0.1:4222');
    expect(config.dataDir).toBe('/var/lib/sluice');
    expect(config.files.roots).toEqual(['/data', '/out']);
    expect(backplaneKind(config)).toBe('nats');
  });

  it('reads YAML from a file; env overrides win over the file', async () => {
    await using dir = await tempDir();
    const file = join(dir.path, 'sluice.yaml');
    await writeFile(
      file,
      'node: { id: h1, port: 7071 }\nstore: postgres://u@db/x\nendpoints:\n  - name: items\n    source: { type: file, path: ./items.jsonl }\n    primaryKey: [id]\n',
    );
    const { config } = loadConfig({ configPath: file, env: { SLUICE_PORT: '7999' } });
    expect(config.node.id).toBe('h1');
    expect(config.node.port).toBe(7999);
    expect(config.endpoints[0]?.name).toBe('items');
    expect(backplaneKind(config)).toBe('direct');
  });

  it('names the exact field and reason of a bad value', () => {
    const error = configError(() => parseConfigText('node: { port: "abc" }'));
    expect(error.errors[0]?.path).toBe('node.port');
    expect(error.message).toContain('node.port');
    const nested = configError(() =>
      parseConfigText(
        'endpoints:\n  - name: items\n    source: { type: file, path: a.jsonl }\n    primaryKey: []\n',
      ),
    );
    expect(nested.errors.map((issue) => issue.path)).toContain('endpoints[0].primaryKey');
    const unknownKey = configError(() => parseConfigText('nodes: {}'));
    expect(unknownKey.message).toMatch(/nodes/);
  });

  it('rejects invalid YAML with its position, and bad combinations', async () => {
    const yaml = configError(() => parseConfigText('node: { id: [unclosed'));
    expect(yaml.message).toMatch(/not valid YAML at line 1/);
    const scalar = configError(() => parseConfigText('just a string'));
    expect(scalar.errors[0]?.path).toBe('(root)');
    const heartbeat = configError(() => parseConfigText('limits: { leaseMs: 1000, heartbeatMs: 1000 }'));
    expect(heartbeat.errors[0]?.path).toBe('limits.heartbeatMs');
    const strategy = configError(() => parseConfigText('backplane: { strategy: nats }'));
    expect(strategy.errors[0]?.path).toBe('nats');
    expect(() => loadConfig({ configPath: '/nonexistent/sluice.yaml', env: {} })).toThrow(
      /Cannot read configuration file/,
    );
    // loadConfig applies core's cross-field rules too, not only the schema of each key.
    await using dir = await tempDir();
    await writeFile(join(dir.path, 'sluice.yaml'), 'backplane: { strategy: nats }\n');
    const fromFile = configError(() => loadConfig({ cwd: dir.path, env: {} }));
    expect(fromFile.errors[0]?.path).toBe('nats');
  });
});
