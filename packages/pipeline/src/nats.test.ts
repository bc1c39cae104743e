/**
 * The NATS connection of the pipeline's JetStream sources and sinks, against a real nats-server with nkey
 * authentication: it is built from configuration by the same definition as the backplane's (core's
 * `natsClientOptions`), so the same `nats` settings mean the same thing to both.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { nkeys } from '@nats-io/transport-node';
import { startNatsServer, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { connectNats } from './nats.js';

const seedOf = (user: ReturnType<typeof nkeys.createUser>) => new TextDecoder().decode(user.getSeed());

/** A creds file for `user` (its JWT is not checked by a server without an operator; its seed is used). */
function credsFor(user: ReturnType<typeof nkeys.createUser>): string {
  return [
    '-----BEGIN NATS USER JWT-----',
    'eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln',
    '------END NATS USER JWT------',
    '',
    '-----BEGIN USER NKEY SEED-----',
    seedOf(user),
    '------END USER NKEY SEED------',
    '',
  ].join('\n');
}

describe('the pipeline NATS connection', () => {
  it('defect: with both credsFile and nkeySeed the pipeline silently dropped the nkey and failed as an authorization violation', async () => {
    await using dir = await tempDir('sluice-pipeline-nats-');
    const allowed = nkeys.createUser();
    const other = nkeys.createUser();
    const serverConfig = join(dir.path, 'nkey.conf');
    await writeFile(serverConfig, `authorization { users: [ { nkey: "${allowed.getPublicKey()}" } ] }\n`);
    await using server = await startNatsServer({ jetstream: false, args: ['-c', serverConfig] });

    // The nkey alone connects, as the backplane's does.
    const nc = await connectNats({ servers: server.url, nkeySeed: seedOf(allowed) });
    expect(nc.isClosed()).toBe(false);
    await nc.close();

    // Both: refused at the key, before any connection, instead of connecting as the creds file's user.
    const creds = join(dir.path, 'other.creds');
    await writeFile(creds, credsFor(other));
    await expect(
      connectNats({ servers: server.url, nkeySeed: seedOf(allowed), credsFile: creds }),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      errors: [
        {
          path: 'nats.nkeySeed',
          message: 'set credsFile or nkeySeed, not both: a creds file carries its own nkey seed',
        },
      ],
    });
  });

  it('defect: a missing creds or TLS file failed as a bare ENOENT naming no key', async () => {
    await expect(
      connectNats({ servers: 'nats://127.0.0.1:1', credsFile: '/nonexistent/x.creds' }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', errors: [{ path: 'nats.credsFile' }] });
    await expect(
      connectNats({
        servers: 'nats://127.0.0.1:1',
        tls: { caFile: '/nonexistent/ca.pem', rejectUnauthorized: true },
      }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', errors: [{ path: 'nats.tls.caFile' }] });
  });
});
