import type { PipelineCheckpoint } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import {
  type GenerationFact,
  planRestart,
  RestartCase,
  type RestartFacts,
  restartCandidate,
} from './restart-plan.js';

const checkpoint: PipelineCheckpoint = { dag: 'd1', epoch: 7, positions: { 'items.source': 120 }, at: 'now' };
const blue: GenerationFact = {
  name: 'items-01',
  state: 'serving',
  createdAt: '2026-12-01T00:00:00Z',
  cause: null,
};
const green: GenerationFact = {
  name: 'items-02',
  state: 'building',
  createdAt: '2026-12-02T00:00:00Z',
  cause: 'schema-change',
};
const resumable = { verdict: 'resumable', checkpoint, reason: 'consistent checkpoint at epoch 7' } as const;
const notResumable = {
  verdict: 'not-resumable',
  reason: 'source "items.source" cannot resume: the file changed',
} as const;
const schemaChanged = { verdict: 'schema-changed', message: 'field "price" is now number' } as const;
const unusable = {
  verdict: 'unusable',
  reason: 'the files of items-0x are gone from the data directory',
} as const;

const facts = (overrides: Partial<RestartFacts>): RestartFacts => ({
  force: false,
  aliasTarget: blue.name,
  generations: [blue],
  assessment: null,
  ...overrides,
});

describe('restartCandidate', () => {
  it('names the alias target when no rebuild was under way', () => {
    expect(restartCandidate(facts({}))).toEqual({ role: 'target', name: 'items-01' });
  });

  it('names the newest green newer than the target, ignoring superseded and older ones', () => {
    const older = { ...green, name: 'items-00', createdAt: '2026-11-30T00:00:00Z' };
    const middle = { ...green, name: 'items-015', createdAt: '2026-12-01T12:00:00Z' };
    const retired = {
      ...green,
      name: 'items-03',
      state: 'retired' as const,
      createdAt: '2026-12-03T00:00:00Z',
    };
    expect(restartCandidate(facts({ generations: [older, blue, middle, green, retired] }))).toEqual({
      role: 'green',
      name: 'items-02',
    });
  });

  it('names nothing for a requested rebuild with no green, nor for an endpoint without a cache', () => {
    expect(restartCandidate(facts({ force: true }))).toBeNull();
    expect(restartCandidate(facts({ aliasTarget: null, generations: [] }))).toBeNull();
  });
});

describe('planRestart', () => {
  it('case 1: resumes the alias target in place from its consistent checkpoint', () => {
    expect(planRestart(facts({ assessment: resumable }))).toEqual({
      case: RestartCase.resumeInPlace,
      cache: 'items-01',
      checkpoint,
      reason: 'continuing in place in items-01: consistent checkpoint at epoch 7',
      cause: null,
    });
  });

  it('case 4: a target that cannot resume gets a new generation, built because of the restart', () => {
    expect(planRestart(facts({ assessment: notResumable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'source "items.source" cannot resume: the file changed',
      cause: 'restart',
    });
  });

  it('case 4: a changed schema, key or index set gets a new generation with cause schema-change', () => {
    expect(planRestart(facts({ assessment: schemaChanged }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'the schema, key or indexes changed (field "price" is now number)',
      cause: 'schema-change',
    });
  });

  it('defect: a target its source changed under was rebuilt as a plain restart (cause restart) when the forced rebuild was retried or found at restart', () => {
    const sourceChanged = {
      verdict: 'source-changed',
      reason: 'Table items: table items was dropped and recreated (relation 16385 → 16392)',
    } as const;
    expect(planRestart(facts({ assessment: sourceChanged }))).toEqual({
      case: RestartCase.rebuildNew,
      reason:
        'the source changed (Table items: table items was dropped and recreated (relation 16385 → 16392))',
      cause: 'schema-change',
    });
    // An interrupted green whose source changed under it is abandoned for a new generation, for the same reason.
    expect(
      planRestart(facts({ generations: [blue, { ...green, cause: 'rebuild' }], assessment: sourceChanged })),
    ).toEqual({
      case: RestartCase.rebuildNew,
      reason:
        'a rebuild into items-02 was interrupted and cannot be continued (the source changed (Table items: table items was dropped and recreated (relation 16385 → 16392)))',
      cause: 'schema-change',
    });
  });

  it('case 4: the first start of an endpoint builds its first generation', () => {
    expect(planRestart(facts({ aliasTarget: null, generations: [] }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'the endpoint has no cache yet',
      cause: 'restart',
    });
  });

  it('case 4: a requested rebuild never continues the target, even a resumable one', () => {
    expect(planRestart(facts({ force: true, assessment: resumable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'rebuild requested',
      cause: 'rebuild',
    });
  });

  it('defect: a rebuild forced by a source change was labelled an operator\'s ("rebuild requested", cause rebuild)', () => {
    const change = 'column "b" was dropped';
    expect(planRestart(facts({ force: true, sourceChange: change, assessment: resumable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'the source changed (column "b" was dropped)',
      cause: 'schema-change',
    });
    // A green left by an interrupted rebuild is refilled for the same reason.
    const refill = planRestart(
      facts({ force: true, sourceChange: change, generations: [blue, green], assessment: notResumable }),
    );
    expect(refill).toMatchObject({ case: RestartCase.rebuildInGreen, cause: 'schema-change' });
    expect(refill.reason).toMatch(
      /^the source changed \(column "b" was dropped\); rebuilding into items-02$/,
    );
  });

  it('case 1 for an interrupted rebuild: the green continues, keeping the cause it was built for', () => {
    expect(planRestart(facts({ generations: [blue, green], assessment: resumable }))).toEqual({
      case: RestartCase.resumeRebuild,
      cache: 'items-02',
      checkpoint,
      reason: 'continuing the rebuild in items-02: consistent checkpoint at epoch 7',
      cause: 'schema-change',
    });
  });

  it('case 4 into the green: an interrupted rebuild that cannot be continued is rebuilt in place', () => {
    expect(
      planRestart(facts({ generations: [blue, { ...green, cause: null }], assessment: notResumable })),
    ).toEqual({
      case: RestartCase.rebuildInGreen,
      cache: 'items-02',
      reason: 'a rebuild into items-02 was interrupted; rebuilding into items-02',
      cause: 'restart',
    });
  });

  it('case 4: an interrupted green built for another schema is abandoned for a new generation', () => {
    expect(
      planRestart(facts({ generations: [blue, { ...green, cause: 'rebuild' }], assessment: schemaChanged })),
    ).toEqual({
      case: RestartCase.rebuildNew,
      reason:
        'a rebuild into items-02 was interrupted and cannot be continued (the schema, key or indexes changed (field "price" is now number))',
      cause: 'schema-change',
    });
  });

  it('case 4: a requested rebuild refills an interrupted green that cannot be continued, with cause rebuild', () => {
    expect(planRestart(facts({ force: true, generations: [blue, green], assessment: notResumable }))).toEqual(
      {
        case: RestartCase.rebuildInGreen,
        cache: 'items-02',
        reason: 'rebuild requested; rebuilding into items-02',
        cause: 'rebuild',
      },
    );
  });

  it('case 4: a requested rebuild supersedes a resumable green with a new generation', () => {
    expect(planRestart(facts({ force: true, generations: [blue, green], assessment: resumable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: 'rebuild requested',
      cause: 'rebuild',
    });
  });

  it('case 4: a target or an interrupted green whose files are gone gets a new generation, never a rebuild in place', () => {
    expect(planRestart(facts({ assessment: unusable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: unusable.reason,
      cause: 'restart',
    });
    expect(planRestart(facts({ generations: [blue, green], assessment: unusable }))).toEqual({
      case: RestartCase.rebuildNew,
      reason: `a rebuild into items-02 was interrupted and cannot be continued (${unusable.reason})`,
      cause: 'schema-change',
    });
  });
});
