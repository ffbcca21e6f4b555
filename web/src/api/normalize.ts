/**
 * Tolerant readers for resources whose exact nesting docs/api.md leaves open: a cluster's summary
 * may be nested under `summary` or flat on the item; a node's status may be given or derived from
 * `ready`/`schedulable`/`gone`. Everything else is passed through unchanged.
 */
import type { Cluster, ClusterNode, ClusterSummary, ClusterTotals, JobDetail, NodeStatus, OutputFile, Worker } from './types';

const num = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) ? value : 0);

export function normalizeCluster(raw: Cluster): Cluster {
  const flat = raw as unknown as Record<string, unknown>;
  const nested = (raw.summary ?? {}) as Partial<ClusterSummary>;
  const pick = (key: keyof ClusterSummary) => num(nested[key] ?? flat[key]);
  const nodesTotal = pick('nodes_total');
  const nodesOnline = pick('nodes_online');
  const summary: ClusterSummary = {
    nodes_total: nodesTotal,
    nodes_online: nodesOnline,
    nodes_offline: nested.nodes_offline ?? (flat.nodes_offline as number | undefined) ?? Math.max(nodesTotal - nodesOnline, 0),
    online_rate:
      nested.online_rate ?? (flat.online_rate as number | undefined) ?? (nodesTotal ? nodesOnline / nodesTotal : 0),
    gpus_total: pick('gpus_total'),
    gpus_allocatable: num(nested.gpus_allocatable ?? flat.gpus_allocatable ?? nested.gpus_total ?? flat.gpus_total),
    gpus_allocated: pick('gpus_allocated'),
    gpus_allocated_foreign: pick('gpus_allocated_foreign'),
    gpus_free: pick('gpus_free'),
    running_jobs: pick('running_jobs'),
  };
  return { ...raw, online: Boolean(raw.online), summary };
}

export function nodeStatusOf(node: Partial<ClusterNode> & { gone?: boolean }): NodeStatus {
  if (node.status) return node.status;
  if (node.gone) return 'gone';
  if (node.ready === false) return 'not_ready';
  if (node.schedulable === false) return 'cordoned';
  return 'ready';
}

export function normalizeNode(raw: ClusterNode): ClusterNode {
  const status = nodeStatusOf(raw);
  const allocatable = raw.gpu_allocatable ?? raw.gpu_count ?? 0;
  const allocated = raw.gpu_allocated ?? 0;
  return {
    ...raw,
    status,
    ready: raw.ready ?? status !== 'not_ready',
    schedulable: raw.schedulable ?? status !== 'cordoned',
    labels: raw.labels ?? {},
    gpu_count: raw.gpu_count ?? 0,
    gpu_free: raw.gpu_free ?? Math.max(allocatable - allocated, 0),
  };
}

/** The overview: the API's `totals` of every cluster, or the listed clusters summed (older gateways). */
export function clusterTotals(page: { items: Cluster[]; totals?: ClusterTotals }): ClusterTotals {
  if (page.totals) {
    const { summary } = normalizeCluster({ name: '', online: true, summary: page.totals });
    return { ...summary, clusters: num(page.totals.clusters), clusters_online: num(page.totals.clusters_online) };
  }
  const sum = (key: keyof ClusterSummary) => page.items.reduce((n, c) => n + num(c.summary[key]), 0);
  const nodesTotal = sum('nodes_total');
  const nodesOnline = sum('nodes_online');
  return {
    clusters: page.items.length,
    clusters_online: page.items.filter((c) => c.online).length,
    nodes_total: nodesTotal,
    nodes_online: nodesOnline,
    nodes_offline: nodesTotal - nodesOnline,
    online_rate: nodesTotal ? nodesOnline / nodesTotal : 0,
    gpus_total: sum('gpus_total'),
    gpus_allocatable: sum('gpus_allocatable'),
    gpus_allocated: sum('gpus_allocated'),
    gpus_allocated_foreign: sum('gpus_allocated_foreign'),
    gpus_free: sum('gpus_free'),
    running_jobs: sum('running_jobs'),
  };
}

/** The label that sorts a cluster's nodes into categories (the user guide's example label). */
export const NODE_CATEGORY_LABEL = 'rlark.io/node-category';

export function nodeCategoryOf(node: Pick<ClusterNode, 'labels'>): string | undefined {
  return node.labels?.[NODE_CATEGORY_LABEL];
}

export function normalizeWorker(raw: Worker): Worker {
  return { ...raw, worker_id: raw.worker_id ?? raw.id ?? `${raw.role}-${raw.index}` };
}

export function normalizeJob<T extends JobDetail>(raw: T): T {
  return { ...raw, workers: (raw.workers ?? []).map(normalizeWorker), timeline: raw.timeline ?? [] };
}

/** Output files of a job, flattened from per-worker manifests (or already flat). */
export function outputFilesOf(job: Pick<JobDetail, 'outputs'>): { files: OutputFile[]; truncated: boolean } {
  const files: OutputFile[] = [];
  let truncated = false;
  for (const entry of job.outputs ?? []) {
    if ('files' in entry && Array.isArray(entry.files)) {
      truncated ||= Boolean(entry.truncated);
      for (const f of entry.files) files.push({ worker_id: entry.worker_id, path: f.path, size: f.size });
    } else if ('path' in entry) {
      files.push(entry);
    }
  }
  return { files, truncated };
}
