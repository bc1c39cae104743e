import { describe, expect, it } from 'vitest';
import { parseStoreUrl, redactUrl } from './url.js';

describe('parseStoreUrl', () => {
  it('resolves sqlite paths against the working directory and keeps :memory:', () => {
    expect(parseStoreUrl('sqlite:./.sluice/store.db', '/srv/app')).toEqual({
      dialect: 'sqlite',
      path: '/srv/app/.sluice/store.db',
    });
    expect(parseStoreUrl('sqlite:/var/lib/sluice.db')).toEqual({
      dialect: 'sqlite',
      path: '/var/lib/sluice.db',
    });
    expect(parseStoreUrl('sqlite:///var/lib/sluice.db')).toEqual({
      dialect: 'sqlite',
      path: '/var/lib/sluice.db',
    });
    expect(parseStoreUrl('sqlite::memory:')).toEqual({ dialect: 'sqlite', path: ':memory:' });
  });

  it('accepts postgres:// and postgresql:// URLs as they are', () => {
    expect(parseStoreUrl('postgres://u:p@db:5432/sluice')).toEqual({
      dialect: 'postgres',
      connectionString: 'postgres://u:p@db:5432/sluice',
    });
    expect(parseStoreUrl('postgresql://db/x').dialect).toBe('postgres');
  });

  it.each([
    '',
    'sqlite:',
    'mysql://db/x',
    'file:/tmp/x',
    'postgres://[bad',
    'sqlite:/tmp/a\u0000b',
    'x'.repeat(5000),
  ])('refuses %j with CONFIG_INVALID', (url) => {
    expect(() => parseStoreUrl(url)).toThrowError(expect.objectContaining({ code: 'CONFIG_INVALID' }));
  });

  it('redacts passwords for logs', () => {
    expect(redactUrl('postgres://u:secret@db:5432/x')).toBe('postgres://u:***@db:5432/x');
    expect(redactUrl('sqlite:./a.db')).toBe('sqlite:./a.db');
  });
});
