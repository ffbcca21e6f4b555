import { describe, expect, it } from 'vitest';
import cases from './fixtures/rlinf-cluster-cases.json';
import { initialState, newRole, toDocument, type WizardState } from '../pages/jobs/wizard/model';
import { rlinfClusterSection } from '../pages/jobs/wizard/rlinf';

describe("RLinf's cluster section", () => {
  it('equals what the server computes for every shared case', () => {
    expect(cases.length).toBeGreaterThan(3);
    for (const c of cases) expect(rlinfClusterSection(c.roles)).toEqual(c.rlinf);
  });

  it("follows the wizard's node counts and GPUs in a template job (Header first)", () => {
    const rollout = newRole('rollout', 2, 1);
    const actor = newRole('actor', 1, 1);
    const stale = rlinfClusterSection([
      { name: 'actor', replicas: 1, gpusPerWorker: 8 },
      { name: 'rollout', replicas: 1, gpusPerWorker: 8 },
    ]);
    const state: WizardState = {
      ...initialState(),
      type: 'template',
      template: 'rl-actor-rollout',
      roles: [rollout, actor],
      headerId: actor.id,
      rlinfConfig: { ...stale, runner: { save_interval: 10 } },
    };
    const config = toDocument(state).spec.rlinfConfig as Record<string, any>;
    expect(config.runner).toEqual({ save_interval: 10 });
    expect(config.cluster.num_nodes).toBe(3);
    expect(config.cluster.component_placement).toEqual({
      actor: { node_group: 'actor', placement: '0-0' },
      rollout: { node_group: 'rollout', placement: '0-1' },
    });
    expect(config.cluster.node_groups).toEqual([
      { label: 'actor', node_ranks: '0-0' },
      { label: 'rollout', node_ranks: '1-2' },
    ]);
  });

  it('leaves a config it did not generate alone', () => {
    const state: WizardState = { ...initialState(), type: 'template', rlinfConfig: { cluster: { num_nodes: 1 } } };
    expect(toDocument(state).spec.rlinfConfig).toEqual({ cluster: { num_nodes: 1 } });
  });
});
