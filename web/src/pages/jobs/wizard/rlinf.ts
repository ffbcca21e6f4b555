/**
 * RLinf's `cluster` section computed from the roles, as the server's job templates compute it
 * (services/scheduler/.../domain/templates.py, `rlinf_cluster_section`): `num_nodes` is the worker count,
 * one node group per role over its node ranks (the Header first, rank 0, then the roles in order — the
 * numbering of `RLINF_NODE_RANK`), and each component placed on every GPU of its group, or on its nodes
 * when the role has no GPU. The wizard recomputes it whenever node counts or GPUs change, so a template's
 * config never keeps placements for GPUs the job no longer has. test/fixtures/rlinf-cluster-cases.json,
 * written from the server's function, keeps both sides equal.
 */
import type { RoleDraft, WizardState } from './model';

export interface RoleShape {
  name: string;
  replicas: number;
  gpusPerWorker: number;
}

const ranks = (first: number, count: number) => `${first}-${first + count - 1}`;

export function rlinfClusterSection(roles: RoleShape[]): { cluster: Record<string, unknown> } {
  const nodeGroups: { label: string; node_ranks: string }[] = [];
  const placement: Record<string, { node_group: string; placement: string }> = {};
  let next = 0;
  for (const role of roles) {
    if (role.replicas < 1) continue;
    nodeGroups.push({ label: role.name, node_ranks: ranks(next, role.replicas) });
    const resources = role.gpusPerWorker ? role.replicas * role.gpusPerWorker : role.replicas;
    placement[role.name] = { node_group: role.name, placement: ranks(0, resources) };
    next += role.replicas;
  }
  return { cluster: { num_nodes: next, component_placement: placement, node_groups: nodeGroups } };
}

/** The roles in rank order: the Header first, then the others in the order they are listed. */
export function rankOrder(state: Pick<WizardState, 'roles' | 'headerId'>): RoleDraft[] {
  const header = state.roles.find((r) => r.id === state.headerId);
  return header ? [header, ...state.roles.filter((r) => r !== header)] : state.roles;
}

/**
 * The template's RLinf config with its cluster section recomputed from the current roles. Only a section
 * the template generated (it has `node_groups`) is recomputed; any other config is left as it is.
 */
export function syncedRlinfConfig(state: WizardState): Record<string, unknown> | undefined {
  const config = state.rlinfConfig;
  const cluster = config?.cluster as Record<string, unknown> | undefined;
  if (state.type !== 'template' || !config || !cluster || !Array.isArray(cluster.node_groups)) return config;
  const section = rlinfClusterSection(rankOrder(state).map((r) => ({ name: r.name.trim(), replicas: r.replicas, gpusPerWorker: r.gpusPerWorker })));
  return { ...config, cluster: { ...cluster, ...section.cluster } };
}
