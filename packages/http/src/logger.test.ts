import { describe, expect, it } from 'vitest';
import { captureLines as capture } from '../test/helpers.js';
import { createLogger } from './logger.js';

describe('createLogger', () => {
  it('writes JSON lines with service, pid and the bindings, at the configured level', () => {
    const { lines, destination } = capture();
    const logger = createLogger({
      service: 'sluice-test',
      level: 'info',
      bindings: { node: 'h1' },
      destination,
    });
    logger.debug('hidden');
    logger.info({ port: 7070 }, 'ready');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 30,
      service: 'sluice-test',
      pid: process.pid,
      node: 'h1',
      port: 7070,
      msg: 'ready',
    });
  });

  it('writes nothing at level silent, and refuses an unknown level', () => {
    const { lines, destination } = capture();
    createLogger({ service: 's', level: 'silent', destination }).fatal('not written');
    expect(lines).toEqual([]);
    expect(() => createLogger({ service: 's', level: 'loud' as 'info', destination })).toThrow(/level:loud/);
  });
});
