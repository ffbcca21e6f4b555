/** Typed functions for every gateway route the console uses (docs/api.md). */
import { api, buildUrl, request } from './client';
import { normalizeCluster, normalizeJob, normalizeNode } from './normalize';
import type {
  Cluster,
  ClusterCreate,
  ClusterCreated,
  ClusterNode,
  ClusterPage,
  Delivery,
  Domain,
  HostPathPolicy,
  DomainCheck,
  Job,
  JobDetail,
  JobDocument,
  JobUsage,
  JobQuery,
  LabelKey,
  MatchResult,
  NotifyEndpoint,
  NotifyEndpointCreate,
  NodeQuery,
  Page,
  PreviewResult,
  Project,
  ProjectCreate,
  ProjectQuota,
  QueueDetail,
  QueuedJob,
  Role,
  AuditEntry,
  Secret,
  ApiToken,
  SetupStatus,
  SshKey,
  Template,
  User,
} from './types';

const enc = encodeURIComponent;

function pageOf<T>(raw: Page<T> | T[] | { items: T[] }, map: (item: T) => T = (x) => x): Page<T> {
  if (Array.isArray(raw)) return { items: raw.map(map), total: raw.length, page: 1, page_size: raw.length };
  const items = (raw.items ?? []).map(map);
  const page = raw as Partial<Page<T>>;
  return { items, total: page.total ?? items.length, page: page.page ?? 1, page_size: page.page_size ?? items.length };
}

export const authApi = {
  login: (username: string, password: string) =>
    api.post<{ user: User }>('/auth/login', { username, password }),
  logout: () => api.post<void>('/auth/logout'),
  me: () => api.get<User>('/auth/me'),
  setupStatus: () => api.get<SetupStatus>('/auth/setup-status'),
  tokens: async () => pageOf(await api.get<Page<ApiToken> | ApiToken[]>('/auth/tokens')),
  createToken: (name: string) => api.post<ApiToken & { token: string }>('/auth/tokens', { name }),
  deleteToken: (id: string) => api.del<void>(`/auth/tokens/${enc(id)}`),
};

export const usersApi = {
  list: async () => pageOf(await api.get<Page<User> | User[]>('/users')),
  create: (body: { username: string; password: string; role: Role }) => api.post<User>('/users', body),
  update: (username: string, body: { password?: string; role?: Role }) => api.patch<User>(`/users/${enc(username)}`, body),
  remove: (username: string) => api.del<void>(`/users/${enc(username)}`),
};

export const auditApi = {
  list: async (query: { actor?: string; action?: string; since?: string; page?: number; page_size?: number }) =>
    pageOf(await api.get<Page<AuditEntry>>('/audit', { ...query })),
};

export const clustersApi = {
  list: async (): Promise<ClusterPage> => {
    const raw = await api.get<ClusterPage>('/clusters', { page_size: 500 });
    return { ...pageOf(raw, normalizeCluster), totals: raw.totals };
  },
  get: async (name: string) => normalizeCluster(await api.get<Cluster>(`/clusters/${enc(name)}`)),
  create: (body: ClusterCreate) => api.post<ClusterCreated>('/clusters', body),
  remove: (name: string) => api.del<void>(`/clusters/${enc(name)}`),
  rotateCredential: (name: string) =>
    api.post<{ agent_credential: string }>(`/clusters/${enc(name)}/credential`),
  hostPathPolicy: (name: string) => api.get<HostPathPolicy>(`/clusters/${enc(name)}/hostpath-policy`),
  setHostPathPolicy: (name: string, allow: string[]) =>
    api.put<HostPathPolicy>(`/clusters/${enc(name)}/hostpath-policy`, { allow }),
};

export const nodesApi = {
  list: async (query: NodeQuery) =>
    pageOf(await api.get<Page<ClusterNode>>('/nodes', { ...query }), normalizeNode),
  get: async (cluster: string, node: string) =>
    normalizeNode(await api.get<ClusterNode>(`/clusters/${enc(cluster)}/nodes/${enc(node)}`)),
  cordon: (cluster: string, node: string) => api.post<void>(`/clusters/${enc(cluster)}/nodes/${enc(node)}/cordon`),
  uncordon: (cluster: string, node: string) =>
    api.post<void>(`/clusters/${enc(cluster)}/nodes/${enc(node)}/uncordon`),
  labels: async (cluster?: string) => (await api.get<{ items: LabelKey[] }>('/labels', { cluster })).items ?? [],
  match: async (cluster: string, selector: string, gpus: number) => {
    const result = await api.get<MatchResult>(`/clusters/${enc(cluster)}/match`, { selector, gpus });
    return { ...result, nodes: result.nodes ?? [] };
  },
};

export const keysApi = {
  list: async (all = false) => pageOf(await api.get<Page<SshKey>>('/keys', all ? { all: true } : undefined)),
  create: (body: { name: string; public_key: string }) => api.post<SshKey>('/keys', body),
  rename: (id: string, name: string) => api.patch<SshKey>(`/keys/${enc(id)}`, { name }),
  /** 409 `key_in_use` (its `extra.jobs`) while pending or running jobs use the key, unless `force`. */
  remove: (id: string, force = false) => api.del<void>(`/keys/${enc(id)}`, force ? { force: true } : undefined),
};

/** Named secrets: yours, or with `project` (admins) a project's. Values go in and never come back. */
export const secretsApi = {
  list: async (project?: string) =>
    pageOf(await api.get<Page<Secret>>('/secrets', { page_size: 500, project })),
  /** 409 `secret_exists` when the name is taken (rotate it instead); 422 naming `name` or `value`. */
  create: (body: { name: string; value: string; project?: string }) => api.post<Secret>('/secrets', body),
  /** The secret's next version. */
  rotate: (name: string, value: string, project?: string) =>
    request<Secret>('PUT', `/secrets/${enc(name)}`, { json: { value }, query: { project } }),
  remove: (name: string, project?: string) => api.del<void>(`/secrets/${enc(name)}`, { project }),
};

export const notifyApi = {
  list: async (all = false) =>
    pageOf(await api.get<Page<NotifyEndpoint>>('/notifications/endpoints', { page_size: 500, ...(all ? { all: true } : {}) })),
  create: (body: NotifyEndpointCreate) => api.post<NotifyEndpoint>('/notifications/endpoints', body),
  remove: (id: string) => api.del<void>(`/notifications/endpoints/${enc(id)}`),
  test: (id: string) => api.post<{ event_id: string }>(`/notifications/endpoints/${enc(id)}:test`),
  deliveries: async (id: string) =>
    pageOf(await api.get<Page<Delivery>>(`/notifications/endpoints/${enc(id)}/deliveries`, { page_size: 50 })),
};

export const projectsApi = {
  list: async () => pageOf(await api.get<{ items: Project[] }>('/projects')),
  create: (body: ProjectCreate) => api.post<Project>('/projects', body),
  setQuota: (name: string, quota: ProjectQuota) => api.put<Project>(`/projects/${enc(name)}/quota`, quota),
  setMembers: (name: string, members: string[]) => api.put<Project>(`/projects/${enc(name)}/members`, { members }),
  remove: (name: string) => api.del<void>(`/projects/${enc(name)}`),
};

export const queueApi = {
  list: async (mine = false) => pageOf(await api.get<{ items: QueuedJob[]; total: number }>('/queue', { mine })),
  explain: (jobId: string) => api.get<QueueDetail>(`/queue/${enc(jobId)}`),
};

export const domainsApi = {
  list: async () => pageOf(await api.get<Page<Domain>>('/domains')),
  get: (name: string) => api.get<Domain>(`/domains/${enc(name)}`),
  create: (body: { name: string; cidr: string; description?: string }) => api.post<Domain>('/domains', body),
  remove: (name: string) => api.del<void>(`/domains/${enc(name)}`),
  check: (cidr: string) => api.post<DomainCheck>('/domains:check', { cidr }),
};

export const jobsApi = {
  templates: async () => pageOf(await api.get<Page<Template> | Template[]>('/templates')).items,
  preview: (spec: JobDocument | string) =>
    typeof spec === 'string'
      ? request<PreviewResult>('POST', '/jobs:preview', { yaml: spec })
      : request<PreviewResult>('POST', '/jobs:preview', { json: spec }),
  submit: (spec: JobDocument | string) =>
    typeof spec === 'string'
      ? request<Job>('POST', '/jobs', { yaml: spec })
      : request<Job>('POST', '/jobs', { json: spec }),
  list: async (query: JobQuery) => pageOf(await api.get<Page<Job>>('/jobs', { ...query })),
  get: async (id: string) => normalizeJob(await api.get<JobDetail>(`/jobs/${enc(id)}`)),
  cancel: (id: string) => api.post<Job>(`/jobs/${enc(id)}:cancel`),
  /** Stops the placed attempt and queues the next, which resumes per spec.resume; 409 `job_not_placed` otherwise (ADR 0014). */
  requeue: (id: string) => api.post<JobDetail>(`/jobs/${enc(id)}:requeue`),
  /** Each worker's CPU, memory and GPU use over the last `since` seconds in `step`-second points (ADR 0017). */
  usage: (id: string, since = 3600, step = 60) => api.get<JobUsage>(`/jobs/${enc(id)}/usage`, { since, step }),
  setSshKeys: (id: string, names: string[]) => api.put<Job>(`/jobs/${enc(id)}/ssh-keys`, { ssh_keys: names }),
  logs: (id: string, worker: string, limit = 2000) =>
    request<string>('GET', `/jobs/${enc(id)}/logs`, { query: { worker, limit }, text: true }),
  logsUrl: (id: string, worker: string, follow = false) =>
    buildUrl(`/jobs/${enc(id)}/logs`, follow ? { worker, follow: 'true' } : { worker, format: 'text', limit: 10000 }),
  eventsUrl: (id: string) => buildUrl(`/jobs/${enc(id)}/events`, { follow: 'true' }),
};
