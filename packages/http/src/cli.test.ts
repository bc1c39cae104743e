import { ConfigError, StoreUnavailableError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { formatCliError } from './cli.js';

describe('formatCliError', () => {
  it('prints a Sluice error as "<name>: <CODE>: <message>", then the fields the message does not name', () => {
    const listed = new ConfigError('Invalid configuration in sluice.yaml:\n  node.port: Too big', [
      { path: 'node.port', message: 'Too big' },
      { path: 'node.id', message: 'Required' },
    ]);
    expect(formatCliError('sluice-app-server', listed)).toBe(
      'sluice-app-server: CONFIG_INVALID: Invalid configuration in sluice.yaml:\n  node.port: Too big\n  - node.id: Required\n',
    );
    const plain = new StoreUnavailableError('PostgreSQL refused the connection');
    expect(formatCliError('x', plain)).toBe('x: STORE_UNAVAILABLE: PostgreSQL refused the connection\n');
  });

  it('prints a port in use as one line with the hint, and anything else with its stack', () => {
    const inUse = Object.assign(new Error('listen EADDRINUSE'), {
      code: 'EADDRINUSE',
      address: '0.0.0.0',
      port: 80,
    });
    expect(formatCliError('x', inUse, 'node.port (SLUICE_PORT)')).toBe(
      'x: 0.0.0.0:80 is already in use; choose another node.port (SLUICE_PORT) or stop what listens there\n',
    );
    const bug = new TypeError('undefined is not a function');
    expect(formatCliError('x', bug)).toBe(`x: ${bug.stack}\n`);
    expect(formatCliError('x', 'thrown string')).toBe('x: thrown string\n');
  });
});
