import { execFileSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { nkeys } from '@nats-io/transport-node';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { countingResponder } from '../../test/helpers.js';
import { createNatsBackplane } from './nats-backplane.js';

const report = { nodeId: 'a', address: 'http://a', epoch: 1 };

/** Proves a connection really works: one node serves, another finds it. */
async function roundTrip(nats: Parameters<typeof createNatsBackplane>[0]['nats']): Promise<void> {
  await using a = await createNatsBackplane({ nats, clusterName: 'sec', nodeId: 'a' });
  await using b = await createNatsBackplane({ nats, clusterName: 'sec', nodeId: 'b' });
  await using _r = await a.serve('t1', countingResponder(report));
  expect(await b.whoRuns('t1', { timeoutMs: 2_000 })).toEqual({ status: 'owner', owner: report });
}

describe('NATS credentials and TLS pass through from config', () => {
  it('user and password', async () => {
    await using server = await startNatsServer({
      jetstream: false,
      args: ['--user', 'sluice', '--pass', 's3cret-pass'],
    });
    await roundTrip({ servers: server.url, user: 'sluice', pass: 's3cret-pass' });
    await expect(
      createNatsBackplane({
        nats: { servers: server.url, user: 'sluice', pass: 'wrong' },
        clusterName: 'c',
        nodeId: 'n',
      }),
    ).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
    await expect(
      createNatsBackplane({ nats: server.url, clusterName: 'c', nodeId: 'n' }),
    ).rejects.toMatchObject({
      code: 'BACKPLANE_UNAVAILABLE',
    });
  });

  it('token', async () => {
    await using server = await startNatsServer({ jetstream: false, args: ['--auth', 'a-long-secret-token'] });
    await roundTrip({ servers: server.url, token: 'a-long-secret-token' });
    await expect(
      createNatsBackplane({ nats: { servers: server.url, token: 'nope' }, clusterName: 'c', nodeId: 'n' }),
    ).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
  });

  it('nkey seed', async () => {
    await using dir = await tempDir();
    const user = nkeys.createUser();
    const config = join(dir.path, 'nkey.conf');
    await writeFile(config, `authorization { users: [ { nkey: "${user.getPublicKey()}" } ] }\n`);
    await using server = await startNatsServer({ jetstream: false, args: ['-c', config] });
    await roundTrip({ servers: server.url, nkeySeed: new TextDecoder().decode(user.getSeed()) });
    const stranger = nkeys.createUser();
    await expect(
      createNatsBackplane({
        nats: { servers: server.url, nkeySeed: new TextDecoder().decode(stranger.getSeed()) },
        clusterName: 'c',
        nodeId: 'n',
      }),
    ).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
  });

  it('both an nkey seed and a creds file: refused at the key before connecting, as the pipeline refuses them', async () => {
    await using dir = await tempDir();
    const creds = join(dir.path, 'user.creds');
    await writeFile(creds, 'not read: the configuration is refused first\n');
    const seed = new TextDecoder().decode(nkeys.createUser().getSeed());
    await expect(
      createNatsBackplane({
        nats: { servers: 'nats://127.0.0.1:1', nkeySeed: seed, credsFile: creds },
        clusterName: 'c',
        nodeId: 'n',
      }),
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

  it('mutual TLS with CA, client certificate and key files', async () => {
    await using dir = await tempDir();
    const file = (name: string) => join(dir.path, name);
    const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
    openssl(
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=test-ca',
      '-keyout',
      file('ca.key'),
      '-out',
      file('ca.pem'),
    );
    await writeFile(file('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
    for (const name of ['server', 'client']) {
      openssl(
        'req',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-subj',
        `/CN=${name}`,
        '-keyout',
        file(`${name}.key`),
        '-out',
        file(`${name}.csr`),
      );
      openssl(
        'x509',
        '-req',
        '-in',
        file(`${name}.csr`),
        '-CA',
        file('ca.pem'),
        '-CAkey',
        file('ca.key'),
        '-CAcreateserial',
        '-days',
        '1',
        '-extfile',
        file('san.ext'),
        '-out',
        file(`${name}.pem`),
      );
    }
    await using server = await startNatsServer({
      jetstream: false,
      args: [
        '--tlsverify',
        '--tlscert',
        file('server.pem'),
        '--tlskey',
        file('server.key'),
        '--tlscacert',
        file('ca.pem'),
      ],
    });
    const tls = {
      caFile: file('ca.pem'),
      certFile: file('client.pem'),
      keyFile: file('client.key'),
      rejectUnauthorized: true,
    };
    await roundTrip({ servers: `tls://127.0.0.1:${server.port}`, tls });
    // Without a client certificate the server refuses us.
    await expect(
      createNatsBackplane({
        nats: {
          servers: `tls://127.0.0.1:${server.port}`,
          tls: { caFile: file('ca.pem'), rejectUnauthorized: true },
        },
        clusterName: 'c',
        nodeId: 'n',
      }),
    ).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
  });

  it('a missing creds or TLS file is a configuration error, before any connection attempt', async () => {
    await expect(
      createNatsBackplane({
        nats: { servers: 'nats://127.0.0.1:1', credsFile: '/nonexistent/x.creds' },
        clusterName: 'c',
        nodeId: 'n',
      }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(
      createNatsBackplane({
        nats: {
          servers: 'nats://127.0.0.1:1',
          tls: { caFile: '/nonexistent/ca.pem', rejectUnauthorized: true },
        },
        clusterName: 'c',
        nodeId: 'n',
      }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(
      createNatsBackplane({ nats: { servers: [] } as never, clusterName: 'c', nodeId: 'n' }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(
      createNatsBackplane({
        nats: 'nats://127.0.0.1:1',
        clusterName: 'c',
        nodeId: 'n',
        kvBucket: 'bad.name',
      }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
  });
});

describe('NATS without JetStream', () => {
  it('owner queries and events work; storing the alias state fails loudly with BACKPLANE_UNAVAILABLE', async () => {
    await using server = await startNatsServer({ jetstream: false });
    await using a = await createNatsBackplane({ nats: server.url, clusterName: 'nojs', nodeId: 'a' });
    await using b = await createNatsBackplane({ nats: server.url, clusterName: 'nojs', nodeId: 'b' });
    await using _r = await a.serve('t1', countingResponder(report));
    expect((await b.whoRuns('t1', { timeoutMs: 1_000 })).status).toBe('owner');
    const seen: string[] = [];
    await using _s = await b.subscribe((e) => void seen.push(e.type));
    await a.publish({ type: 'SnapshottingDone', endpoint: 'e', cache: 'c', source: 's', at: 'now' });
    await expect(
      a.publish({
        type: 'AliasRedirected',
        host: 'h1',
        alias: 'x',
        from: null,
        to: 'y',
        checkpoint: null,
        at: 'now',
      }),
    ).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
    await expect(b.latestAliasEvents()).rejects.toMatchObject({ code: 'BACKPLANE_UNAVAILABLE' });
    await waitFor(() => seen.length === 2, { what: 'both events to be fanned out' });
    expect(seen).toEqual(['SnapshottingDone', 'AliasRedirected']);
  });
});
