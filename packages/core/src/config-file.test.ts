import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfigFile, parseConfigText, redactConfig, redactUrl } from './config-file.js';

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

describe('redactConfig', () => {
  it('masks secrets and URL passwords, keeps everything else', () => {
    const config = parseConfigText(
      [
        'store: postgres://sluice:hunter2@db:5432/sluice',
        'control: { auth: { tokens: ["0123456789abcdef0123", "abcdef0123456789abcd"] } }',
        'api: { auth: { jwtSecret: "a-very-long-secret-value" } }',
        'connections: { wh: { type: postgres, url: "postgres://reader:pw@wh/sales" } }',
        'endpoints: [{ name: e, source: { type: postgres, connection: wh, table: t, key: [id] }, primaryKey: [id] }]',
      ].join('\n'),
    );
    const redacted = redactConfig(config);
    const text = JSON.stringify(redacted);
    for (const secret of ['hunter2', '0123456789abcdef0123', 'a-very-long-secret-value', ':pw@'])
      expect(text).not.toContain(secret);
    expect(redacted.store).toBe('postgres://sluice:***@db:5432/sluice');
    expect(redacted.control.auth?.tokens).toEqual(['***', '***']);
    expect(redacted.api.auth?.jwtSecret).toBe('***');
    expect(redacted.endpoints[0]?.source).toMatchObject({ key: ['id'], table: 't' });
    expect(config.store).toBe('postgres://sluice:hunter2@db:5432/sluice'); // the original is untouched
  });
});

describe('redactUrl', () => {
  it('defect: printed libpq password query parameters and NATS token URLs in clear; now masks them, keeps the rest', () => {
    const cases: Array<[string, string]> = [
      ['postgres://u:secret@db:5432/x', 'postgres://u:***@db:5432/x'],
      ['postgres://u@h/db?password=storepw', 'postgres://u@h/db?password=***'],
      [
        'postgresql://u@h/db?sslmode=require&password=a%20b&application_name=x',
        'postgresql://u@h/db?sslmode=require&password=***&application_name=x',
      ],
      [
        'postgres://u@h/db?sslpassword=keypw&sslkey=/etc/k.pem',
        'postgres://u@h/db?sslpassword=***&sslkey=/etc/k.pem',
      ],
      ['postgres://u@h/db?PASSWORD=x#frag', 'postgres://u@h/db?PASSWORD=***#frag'],
      ['postgres://u@h/db', 'postgres://u@h/db'],
      ['nats://mytoken123@127.0.0.1:4222', 'nats://***@127.0.0.1:4222'],
      ['nats://user:pw@127.0.0.1:4222', 'nats://user:***@127.0.0.1:4222'],
      ['tls://tok@nats.example:4222', 'tls://***@nats.example:4222'],
      ['nats://127.0.0.1:4222', 'nats://127.0.0.1:4222'],
      ['http://10.0.0.5:7070', 'http://10.0.0.5:7070'],
      ['sqlite:./.sluice/store.db', 'sqlite:./.sluice/store.db'],
      ['./data/items.jsonl', './data/items.jsonl'],
      ['not a url: password=x', 'not a url: password=x'],
    ];
    for (const [url, expected] of cases) expect(redactUrl(url), url).toBe(expected);
  });

  it('defect: redactConfig printed postgres ?password= and NATS tokens in clear (store, nats, connections)', () => {
    const config = parseConfigText(
      [
        'store: "postgres://u@h/db?password=storepw"',
        'nats: "nats://mytoken123@127.0.0.1:4222"',
        'connections:',
        '  wh: { type: postgres, url: "postgres://r@wh/sales?sslpassword=keypw&password=whpw" }',
        '  bus: { type: nats, nats: { servers: ["nats://bustoken@10.0.0.1:4222"] } }',
      ].join('\n'),
    );
    const text = JSON.stringify(redactConfig(config));
    for (const secret of ['storepw', 'mytoken123', 'keypw', 'whpw', 'bustoken'])
      expect(text).not.toContain(secret);
    expect(redactConfig(config).store).toBe('postgres://u@h/db?password=***');
    expect(redactConfig(config).nats).toBe('nats://***@127.0.0.1:4222');
  });
});

describe('endpoint connections', () => {
  it('an endpoint source naming a missing or wrong-typed connection is CONFIG_INVALID at that path', () => {
    const missing = failure(() =>
      parseConfigText(
        'endpoints: [{ name: e, source: { type: postgres, connection: nope, table: t, key: [id] }, primaryKey: [id] }]',
      ),
    );
    expect(missing.code).toBe('CONFIG_INVALID');
    expect(missing.errors?.map((e) => e.path)).toEqual(['endpoints[0].source.connection']);
    expect(missing.message).toMatch(/no connection named "nope"/);
    const wrongType = failure(() =>
      parseConfigText(
        [
          'connections: { bus: { type: nats, nats: { servers: "nats://127.0.0.1:4222" } } }',
          'endpoints: [{ name: e, source: { type: postgres, connection: bus, table: t, key: [id] }, primaryKey: [id] }]',
        ].join('\n'),
      ),
    );
    expect(wrongType.message).toMatch(/connection "bus" is of type nats; a postgres source needs a postgres/);
  });
});

describe('environment overrides in errors', () => {
  it('a bad value from a SLUICE_* variable names the variable', () => {
    const err = failure(() => parseConfigText('node: { port: 7070 }\n', { SLUICE_PORT: 'abc' }, 'ok.yaml'));
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.message).toMatch(/node\.port: .* \(from SLUICE_PORT="abc"\)/);
  });

  it('defect: a negative or fractional port from a variable was said to be a string, and a fractional port in the file "expected int"', () => {
    const negative = failure(() => parseConfigText('', { SLUICE_PORT: '-1' }, 'ok.yaml'));
    expect(negative.message).toContain(
      'node.port: Too small: expected number to be >=0 (from SLUICE_PORT="-1")',
    );
    const fraction = failure(() => parseConfigText('', { SLUICE_API_PORT: '8080.5' }, 'ok.yaml'));
    expect(fraction.message).toContain(
      'api.port: Invalid input: expected a whole number (from SLUICE_API_PORT="8080.5")',
    );
    const inFile = failure(() => parseConfigText('api: { port: 8080.5 }\n', {}, 'ok.yaml'));
    expect(inFile.message).toContain('api.port: Invalid input: expected a whole number');
  });
});
