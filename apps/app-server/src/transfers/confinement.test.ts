import { mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type TransferRequest, TransferRequestSchema } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { RequestPolicy } from './confinement.js';

function request(source: unknown, destination: unknown): TransferRequest {
  return TransferRequestSchema.parse({ id: 't1', source, destination });
}

const file = (path: string) => ({ type: 'file', path, format: 'jsonl' });

describe('RequestPolicy', () => {
  it('anchors relative file paths to its working directory, leaving absolute paths and other addresses as sent', () => {
    const policy = new RequestPolicy({ roots: [], connections: {}, endpoints: [], cwd: '/srv/node-a' });
    const sent = request(file('data/in.jsonl'), file('/out/x.jsonl'));
    expect(policy.anchor(sent)).toEqual({
      ...sent,
      source: { ...sent.source, path: '/srv/node-a/data/in.jsonl' },
    });
    const table = request(file('../in.jsonl'), { type: 'postgres', connection: 'wh', table: 't', key: 'id' });
    expect(policy.anchor(table)).toEqual({ ...table, source: { ...table.source, path: '/srv/in.jsonl' } });
  });

  it('allows paths inside the roots and returns their real paths', async () => {
    await using dir = await tempDir();
    await mkdir(join(dir.path, 'data'));
    await writeFile(join(dir.path, 'data', 'in.jsonl'), '{}\n');
    const policy = new RequestPolicy({ roots: ['data'], connections: {}, endpoints: [], cwd: dir.path });
    const confined = policy.confine(
      request(file('data/in.jsonl'), file(join(dir.path, 'data/new/out.jsonl'))),
    );
    expect(confined.source).toMatchObject({ path: join(policy.roots[0]!, 'in.jsonl') });
    expect(confined.destination).toMatchObject({ path: join(policy.roots[0]!, 'new', 'out.jsonl') });
  });

  it('refuses "..", absolute escapes and symlinks that leave the roots', async () => {
    await using dir = await tempDir();
    await using outside = await tempDir();
    await mkdir(join(dir.path, 'data'));
    await symlink(outside.path, join(dir.path, 'data', 'link'));
    await symlink(join(outside.path, 'secret.jsonl'), join(dir.path, 'data', 'file-link.jsonl'));
    const policy = new RequestPolicy({ roots: ['data'], connections: {}, endpoints: [], cwd: dir.path });
    const ok = file('data/a.jsonl');
    for (const path of [
      'data/../x.jsonl',
      '/etc/passwd',
      'data/link/x.jsonl',
      'data/file-link.jsonl',
      `${dir.path}/data-sibling/x.jsonl`,
    ]) {
      expect(() => policy.confine(request(file(path), ok)), path).toThrow(
        expect.objectContaining({ code: 'PATH_NOT_ALLOWED', status: 403 }),
      );
      expect(() => policy.confine(request(ok, file(path))), path).toThrow(
        expect.objectContaining({ code: 'PATH_NOT_ALLOWED' }),
      );
    }
  });

  it('defect: paths that cannot exist (a file as parent, a name over 255 bytes, a symlink loop) and a destination that is a directory threw raw errno errors (500 INTERNAL); now VALIDATION_FAILED at their field', async () => {
    await using dir = await tempDir();
    await mkdir(join(dir.path, 'data'));
    await mkdir(join(dir.path, 'out'));
    await writeFile(join(dir.path, 'data', 'small.jsonl'), '{}\n');
    await symlink('loop2', join(dir.path, 'out', 'loop1'));
    await symlink('loop1', join(dir.path, 'out', 'loop2'));
    const policy = new RequestPolicy({
      roots: ['data', 'out'],
      connections: {},
      endpoints: [],
      cwd: dir.path,
    });
    const ok = file('data/small.jsonl');
    const okOut = file('out/ok.jsonl');
    const cannotExist = [
      ['data/small.jsonl/x', /is a file, not a directory/],
      ['data/small.jsonl/x/y.jsonl', /is a file, not a directory/],
      [`data/${'n'.repeat(256)}`, /longer than/],
      [`data/${'n'.repeat(300)}/x.jsonl`, /longer than/],
      ['out/loop1', /symlink loop/],
      ['out/loop1/x.jsonl', /symlink loop/],
    ] as const;
    for (const [path, message] of cannotExist) {
      for (const [side, req] of [
        ['source', request(file(path), okOut)],
        ['destination', request(ok, file(path))],
      ] as const) {
        let thrown: unknown;
        try {
          policy.confine(req);
        } catch (err) {
          thrown = err;
        }
        expect(thrown, `${side} ${path}`).toMatchObject({
          code: 'VALIDATION_FAILED',
          status: 400,
          errors: [{ path: `${side}.path`, message: expect.stringMatching(message) }],
        });
      }
    }
    // A destination that is a directory (a root itself, or one inside): its temp file would land beside it.
    await mkdir(join(dir.path, 'out', 'sub'));
    for (const path of ['out', 'out/sub', `${dir.path}/data`, 'out/.']) {
      expect(() => policy.confine(request(ok, file(path))), path).toThrow(
        expect.objectContaining({
          code: 'VALIDATION_FAILED',
          errors: [{ path: 'destination.path', message: expect.stringMatching(/is a directory/) }],
        }),
      );
    }
    // Outside the roots stays 403 even when the path could not exist either (also through a symlink).
    await symlink('/etc/passwd/x', join(dir.path, 'out', 'via-file'));
    expect(() => policy.confine(request(ok, file('out/via-file')))).toThrow(
      expect.objectContaining({ code: 'PATH_NOT_ALLOWED' }),
    );
    expect(() => policy.confine(request(ok, file(`/etc/passwd/${'n'.repeat(300)}`)))).toThrow(
      expect.objectContaining({ code: 'PATH_NOT_ALLOWED' }),
    );
    expect(await readdir(join(dir.path, 'out'))).toEqual(['loop1', 'loop2', 'sub', 'via-file']);
  });

  it('defaults the roots to the working directory', async () => {
    await using dir = await tempDir();
    const policy = new RequestPolicy({ roots: [], connections: {}, endpoints: [], cwd: dir.path });
    expect(() => policy.confine(request(file('in.jsonl'), file('out.jsonl')))).not.toThrow();
    expect(() => policy.confine(request(file('../in.jsonl'), file('out.jsonl')))).toThrow(/outside/);
  });

  it('refuses unknown connections and endpoints with 422', () => {
    const policy = new RequestPolicy({
      roots: ['/tmp'],
      connections: { warehouse: { type: 'postgres', url: 'postgres://x@y/z' } },
      endpoints: ['items'],
      cwd: '/tmp',
    });
    const pg = (connection: string) => ({ type: 'postgres', connection, table: 't' });
    expect(() =>
      policy.confine(request(pg('warehouse'), { type: 'endpoint', endpoint: 'items' })),
    ).not.toThrow();
    expect(() => policy.confine(request(pg('other'), file('/tmp/o.jsonl')))).toThrow(
      expect.objectContaining({ code: 'UNKNOWN_CONNECTION', status: 422 }),
    );
    expect(() =>
      policy.confine(
        request(file('/tmp/i.jsonl'), {
          type: 'jetstream',
          stream: 's',
          subject: 'a',
          connection: 'warehouse',
        }),
      ),
    ).toThrow(expect.objectContaining({ code: 'UNKNOWN_CONNECTION' }));
    expect(() =>
      policy.confine(request(file('/tmp/i.jsonl'), { type: 'endpoint', endpoint: 'nope' })),
    ).toThrow(expect.objectContaining({ code: 'UNKNOWN_ENDPOINT', status: 404 }));
  });
});
