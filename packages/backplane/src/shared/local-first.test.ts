import { capturingLogger } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { countingResponder } from '../../test/helpers.js';
import { localOwner, localTerminate } from './local-first.js';
import { LocalRegistry } from './local-registry.js';

const owner = { nodeId: 'n1', address: 'http://n1:7070', epoch: 3 };

function side() {
  return { registry: new LocalRegistry(), nodeId: 'n1', logger: capturingLogger() };
}

describe('the local step every strategy takes first', () => {
  it('answers owner for a transfer this process runs, null (ask the others) for any other', () => {
    const local = side();
    local.registry.add('t1', countingResponder(owner));
    expect(localOwner(local, 't1')).toEqual({ status: 'owner', owner });
    expect(localOwner(local, 't2')).toBeNull();
  });

  it('answers unknown, never nobody, when its own responder reports nonsense, and logs it', () => {
    const local = side();
    local.registry.add('t1', { report: () => ({ nodeId: '' }) as never, async terminate() {} });
    expect(localOwner(local, 't1')).toEqual({
      status: 'unknown',
      reason: 'the owner produced an invalid report',
    });
    expect(local.logger.entries.map((e) => [e.level, e.msg])).toEqual([
      ['error', 'local responder produced an invalid report'],
    ]);
  });

  it('stops a transfer this process runs once, and leaves others to the caller', async () => {
    const local = side();
    const responder = countingResponder(owner);
    local.registry.add('t1', responder);
    expect(await localTerminate(local, 't1')).toEqual({ status: 'terminated', by: 'n1' });
    expect(await localTerminate(local, 't1')).toEqual({ status: 'terminated', by: 'n1' });
    expect(responder.terminations).toBe(1);
    expect(await localTerminate(local, 't2')).toBeNull();
  });

  it('answers unknown when stopping fails, and logs it', async () => {
    const local = side();
    local.registry.add('t1', {
      report: () => owner,
      async terminate() {
        throw new Error('disk on fire');
      },
    });
    expect(await localTerminate(local, 't1')).toEqual({
      status: 'unknown',
      reason: 'the owner failed to stop: disk on fire',
    });
    expect(local.logger.entries.map((e) => e.msg)).toEqual(['terminating a local transfer failed']);
  });
});
