import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '@sluice/core';
import { expectSluiceError, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { loadConfig } from './config.js';

describe('loadConfig', () => {
  it('reads sluice.yaml, applies env overrides and resolves dataDir against the working directory (as the app-server does)', async () => {
    await using dir = await tempDir();
    const file = join(dir.path, 'sluice.yaml');
    await writeFile(
      file,
      'dataDir: ./data\napi: { port: 9000, reconcileMs: 1000 }\nnats: nats://10.0.0.1:4222\n',
    );
    const plain = loadConfig({ configPath: file, cwd: dir.path });
    expect(plain.config.api.port).toBe(9000);
    expect(plain.config.api.reconcileMs).toBe(1000);
    expect(plain.dataDir).toBe(join(dir.path, 'data'));
    expect(loadConfig({ configPath: file, cwd: '/srv' }).dataDir).toBe('/srv/data');
    const env = { SLUICE_API_PORT: '9100', SLUICE_NATS_URL: 'nats://127.0.0.1:5222', SLUICE_DATA_DIR: 'rel' };
    const overridden = loadConfig({ configPath: file, cwd: '/srv', env });
    expect(overridden.config.api.port).toBe(9100);
    expect(overridden.config.nats).toBe('nats://127.0.0.1:5222');
    expect(overridden.dataDir).toBe('/srv/rel');
  });

  it('falls back to ./sluice.yaml, then to embedded defaults', async () => {
    await using dir = await tempDir();
    expect(loadConfig({ cwd: dir.path }).path).toBeNull();
    expect(loadConfig({ cwd: dir.path }).config.api.port).toBe(8080);
    await writeFile(join(dir.path, 'sluice.yaml'), 'api: { port: 8181 }\n');
    expect(loadConfig({ cwd: dir.path }).config.api.port).toBe(8181);
  });

  it('rejects bad files with CONFIG_INVALID naming the path', async () => {
    await using dir = await tempDir();
    const file = join(dir.path, 'bad.yaml');
    await writeFile(file, 'api: { port: "eighty" }\n');
    const invalid = expectSluiceError(() => loadConfig({ configPath: file }), 'CONFIG_INVALID');
    expect((invalid as unknown as { errors: Array<{ path: string }> }).errors[0]?.path).toBe('api.port');
    expectSluiceError(() => loadConfig({ configPath: join(dir.path, 'missing.yaml') }), 'CONFIG_INVALID');
    await writeFile(file, 'api: [unclosed\n');
    expectSluiceError(() => loadConfig({ configPath: file }), 'CONFIG_INVALID');
  });

  it("runs the app's own rules after core's schema, and only on a configuration the schema accepted", async () => {
    await using dir = await tempDir();
    const seen: number[] = [];
    const validate = (config: { api: { port: number } }) => {
      seen.push(config.api.port);
      if (config.api.port === 9999)
        throw new ConfigError('api.port 9999 is reserved', [{ path: 'api.port', message: 'reserved' }]);
    };
    expect(loadConfig({ cwd: dir.path, env: { SLUICE_API_PORT: '9001' }, validate }).config.api.port).toBe(
      9001,
    );
    const refused = expectSluiceError(
      () => loadConfig({ cwd: dir.path, env: { SLUICE_API_PORT: '9999' }, validate }),
      'CONFIG_INVALID',
    );
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as ConfigError).errors).toEqual([{ path: 'api.port', message: 'reserved' }]);
    // A value the schema refuses never reaches the app's rules.
    expectSluiceError(
      () => loadConfig({ cwd: dir.path, env: { SLUICE_API_PORT: 'x' }, validate }),
      'CONFIG_INVALID',
    );
    expect(seen).toEqual([9001, 9999]);
  });
});
