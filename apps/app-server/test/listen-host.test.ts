/**
 * A `node.host` the app-server cannot listen on, as an operator meets it (a real process): a host name that does
 * not resolve, an address that is not this machine's. The check at the key (config-check-defects.test.ts) can only
 * refuse what is not an address at all; these pass it and fail at `listen`.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN } from './helpers.js';

describe('node.host that cannot be listened on', () => {
  it("defect: a node.host that does not resolve or is not this machine's crashed the app-server with a stack naming no key", async () => {
    await using dir = await tempDir('sluice-listen-host-');
    const cases = [
      {
        host: 'no-such-host.invalid',
        line: 'sluice-app-server: CONFIG_INVALID: node.host: no-such-host.invalid does not resolve to an address (getaddrinfo ENOTFOUND)',
      },
      {
        host: '10.255.255.1',
        line: 'sluice-app-server: CONFIG_INVALID: node.host: 10.255.255.1 is not an address of this machine (listen EADDRNOTAVAIL); use one of its addresses, or 0.0.0.0 for all of them',
      },
    ];
    for (const { host, line } of cases) {
      await writeFile(
        join(dir.path, 'sluice.yaml'),
        `node: { id: n1, host: ${host}, port: 0, advertisedUrl: "http://127.0.0.1:7070" }\nlogLevel: silent\n`,
      );
      const child = spawnTs(BIN, [], { cwd: dir.path });
      expect({ host, code: (await child.exited).code }).toEqual({ host, code: 1 });
      expect(child.output()).toBe(line);
    }
  }, 90_000);
});
