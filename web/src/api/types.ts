/**
 * The shapes the gateway returns (docs/api.md). Field names are the wire names (snake_case for
 * resources, camelCase inside job documents, as the job spec defines them).
 *
 * Where docs/api.md names a field without its exact shape, the console reads it tolerantly
 * (see `normalize.ts`) and web/README.md lists what it expects.
 */

export type Role = 'admin' | 'user';

export interface User {
  username: string;
  role: Role;
  created_at?: string;
}

export interface SetupStatus {
  /** True while no admin exists yet: the login page then explains how to create the first one. */
  needs_admin?: boolean;
  needs_setup?: boolean;
}

export interface Page<T> {
  items: T[];
  total: number;
  page: number;
  page_size: number;
}

/** A sentence's catalogue key and the values it interpolates, next to its English `message` (ADR 0011). */
export interface ServerSaid {
  message_key?: string | null;
  params?: Record<string, string | number> | null;
}

export interface ApiErrorDetail extends ServerSaid {
  field?: string | null;
  message: string;
  code?: string;
  line?: number | null;
  column?: number | null;
}

export interface ApiErrorBody {
  error: ServerSaid & {
    code: string;
    message: string;
    field?: string | null;
    details?: { errors?: ApiErrorDetail[] } & Record<string, unknown>;
  };
}

// ----------------------------------------------------------------------------------------------
// Clusters and nodes

export interface ClusterSummary {
  nodes_total: number;
  nodes_online: number;
  nodes_offline: number;
  online_rate: number;
  /** GPU capacity of the nodes that are not gone. */
  gpus_total: number;
  /** Allocatable GPUs of the nodes that are not gone. */
  gpus_allocatable: number;
  /** GPUs held now: RLark's workers and everything else on the nodes. */
  gpus_allocated: number;
  /** Of gpus_allocated, those not held by RLark workers placed on their node (workloads RLark did not place). */
  gpus_allocated_foreign: number;
  /** Allocatable − allocated where a worker could land now (ready, schedulable nodes of an online cluster). */
  gpus_free: number;
  running_jobs: number;
}

/** Every cluster together (`totals` of the cluster list): the overview. */
export interface ClusterTotals extends ClusterSummary {
  clusters: number;
  clusters_online: number;
}

export interface ClusterPage extends Page<Cluster> {
  totals?: ClusterTotals;
}

export interface Cluster {
  name: string;
  display_name?: string;
  category?: string;
  region?: string;
  runtime?: 'local' | 'kubernetes' | string;
  pod_cidrs?: string[];
  service_cidrs?: string[];
  labels?: Record<string, string>;
  /** Host directories workers may mount (hostPath sources); empty: none. */
  hostpath_allow?: string[];
  online: boolean;
  last_seen?: string | null;
  summary: ClusterSummary;
}

/** ``GET/PUT /api/v1/clusters/{name}/hostpath-policy``. */
export interface HostPathPolicy {
  cluster: string;
  allow: string[];
}

export interface ClusterCreate {
  name: string;
  display_name?: string;
  category?: string;
  region?: string;
  runtime: 'local' | 'kubernetes';
  pod_cidrs: string[];
  service_cidrs: string[];
  labels: Record<string, string>;
}

export interface ClusterCreated extends Cluster {
  agent_credential: string;
}

export type NodeStatus = 'ready' | 'not_ready' | 'cordoned' | 'gone';

export interface NodeWorker {
  job_id: string;
  job_name?: string;
  worker_id?: string;
  role?: string;
  gpus?: number;
  phase?: string;
  reported_at?: string;
}

export interface ClusterNode {
  cluster: string;
  name: string;
  status: NodeStatus;
  ready: boolean;
  schedulable: boolean;
  category?: string;
  gpu_count: number;
  gpu_model?: string;
  gpu_allocatable?: number;
  gpu_allocated?: number;
  /** Of gpu_allocated, those RLark workers placed on this node do not hold. */
  gpu_allocated_foreign?: number;
  gpu_free?: number;
  cpu_millis?: number;
  cpu_allocatable_millis?: number;
  cpu_allocated_millis?: number;
  memory_bytes?: number;
  memory_allocatable_bytes?: number;
  memory_allocated_bytes?: number;
  labels: Record<string, string>;
  addresses?: string[];
  observed_at?: string | null;
  workers?: NodeWorker[];
}

export interface LabelValue {
  value: string;
  nodes: number;
}

export interface LabelKey {
  key: string;
  values: LabelValue[];
}

/** A node in a match answer: only what the selector preview needs. */
export interface MatchedNode {
  name: string;
  ready: boolean;
  schedulable: boolean;
  gpu_model?: string;
  gpu_free: number;
  gpu_count?: number;
  gpu_allocatable?: number;
  gpu_allocated?: number;
  gpu_allocated_foreign?: number;
  fits?: boolean;
}

export interface MatchResult {
  cluster?: string;
  cluster_online?: boolean;
  total: number;
  matching: number;
  ready: number;
  schedulable: number;
  with_free_gpus: number;
  nodes: MatchedNode[];
}

export interface NodeQuery {
  cluster?: string;
  status?: NodeStatus;
  category?: string;
  selector?: string;
  q?: string;
  sort?: string;
  page?: number;
  page_size?: number;
}

// ----------------------------------------------------------------------------------------------
// SSH keys

export interface SshKey {
  id: string;
  name: string;
  owner: string;
  key_type: string;
  bits: number;
  fingerprint: string;
  comment: string;
  public_key: string;
  created_at: string;
}

// ----------------------------------------------------------------------------------------------
// Named secrets (ADR 0025): names, versions and use; a value is sent, never returned

export type SecretScope = 'user' | 'project';

export interface Secret {
  name: string;
  scope: SecretScope;
  /** The user, or for `scope: project` the project, whose secret it is. */
  owner: string;
  /** 1 when created; each rotation adds one. */
  version: number;
  created_by: string;
  created_at: string;
  updated_by: string;
  updated_at: string;
  /** When a worker last received it; null while no worker has. */
  last_used_at: string | null;
}

// ----------------------------------------------------------------------------------------------
// Network domains

export interface Domain {
  name: string;
  cidr: string;
  description?: string;
  created_by?: string;
  created_at?: string;
  capacity?: number;
  allocated?: number;
  free?: number;
  /** Clusters whose CIDRs came to overlap this domain after it was created. */
  warnings?: string[];
  /** Detail only: addresses allocated per cluster. */
  clusters?: Array<{ cluster: string; allocated: number } | string>;
  tunnels?: { clusters: string[]; links: Array<{ a: string; b: string; via?: string | null }> };
  /** Detail only: each link as each cluster's agent last reported it. */
  tunnel_states?: TunnelLinkState[];
}

/** One agent's last report on one SSH tunnel of a domain (`GET /domains/{name}`). */
export interface TunnelLinkState {
  cluster: string;
  peer: string;
  state: 'up' | 'down' | 'connecting' | string;
  since: string;
  rtt_ms?: number | null;
  bytes_sent: number;
  bytes_received: number;
  last_error: string;
  reported_at: string;
}

export interface DomainConflict extends ServerSaid {
  kind?: string;
  name?: string;
  cidr?: string;
  cluster?: string;
  message?: string;
}

export interface DomainCheck {
  ok: boolean;
  /** The network, normalised. */
  cidr?: string | null;
  /** Addresses workers can get (.0 and .255 never). */
  capacity?: number | null;
  conflicts: Array<DomainConflict | string>;
  /** Why the CIDR itself is refused (not private, malformed…), if it is. */
  error?: (ServerSaid & { code: string; message: string; field?: string | null }) | null;
}

// ----------------------------------------------------------------------------------------------
// Jobs

export type JobStatus =
  | 'Pending'
  | 'Scheduled'
  | 'Starting'
  | 'Running'
  | 'Succeeded'
  | 'Failed'
  | 'Cancelled'
  | 'Lost';

export const JOB_STATES: JobStatus[] = [
  'Pending',
  'Scheduled',
  'Starting',
  'Running',
  'Succeeded',
  'Failed',
  'Cancelled',
  'Lost',
];

export const TERMINAL_STATES: JobStatus[] = ['Succeeded', 'Failed', 'Cancelled', 'Lost'];

export interface MountSpec {
  name: string;
  type: 'hostPath' | 'pvc' | 'objectStorage';
  source: string;
  path: string;
  readOnly?: boolean;
  secretRef?: string;
}

export interface RoleSpec {
  name: string;
  /** Left out: any cluster — the scheduler chooses (ADR 0026), among `clusters` and those `clusterSelector` matches. */
  cluster?: string;
  clusters?: string[];
  clusterSelector?: Record<string, string>;
  nodeSelector?: Record<string, string>;
  replicas: number;
  gpusPerWorker: number;
  image: string;
  prepareScript?: string;
  mounts?: MountSpec[];
  /** A value, or `{secret: name}`: the value of a named secret, set on the worker (never in the document). */
  env?: Record<string, string | EnvFromSecret>;
}

export interface EnvFromSecret {
  secret: string;
}

export interface JobDocument {
  apiVersion: 'rlark.io/v1';
  kind: 'Job';
  metadata: { name: string };
  spec: {
    type?: 'custom' | 'template';
    template?: string;
    header?: string;
    networkDomain?: string;
    sshKeys?: string[];
    runScript?: string;
    tensorboardDir?: string;
    outputs?: string[];
    priority?: number;
    /** The project whose GPU quota the job counts against (ADR 0020). */
    project?: string;
    restartPolicy?: RestartPolicy;
    /** 10..604800 s: the Header prints a line or writes a TensorBoard step this often, else the job fails as Stalled (ADR 0014). */
    progressDeadlineSeconds?: number;
    /** 0..3600 s: on any stop (cancel, restart, requeue) the run script gets SIGTERM and this long to checkpoint (ADR 0014). */
    terminationGracePeriodSeconds?: number;
    resume?: Resume;
    /** How the scheduler chooses clusters for roles that name none (ADR 0026). */
    placement?: PlacementPolicy;
    rlinfConfig?: Record<string, unknown>;
    tasks: RoleSpec[];
  };
}

/** `spec.placement` (ADR 0026): `spanClusters` defaults to `whenNeeded`; `keepTogether` to the roles with GPUs. */
export interface PlacementPolicy {
  spanClusters?: 'never' | 'whenNeeded';
  keepTogether?: string[];
}

/** The failure kinds a restart policy may name (services/scheduler/.../domain/document/model.py `RestartOn`). */
export const RESTART_KINDS = ['WorkerLost', 'NodeGone', 'Evicted', 'OOMKilled', 'TunnelDown', 'Stalled', 'ExitCode'] as const;
export type RestartKind = (typeof RESTART_KINDS)[number];

/** `spec.restartPolicy` (ADR 0014): new attempts after the failures named in `on`. */
export interface RestartPolicy {
  maxRestarts?: number;
  on?: RestartKind[];
  exitCodes?: number[];
  backoffSeconds?: number;
}

/** `spec.resume` (ADR 0015): each attempt resumes from the newest complete checkpoint under `dir` (relative to the first output). */
export interface Resume {
  from: 'latestCheckpoint';
  dir: string;
}

/** One attempt of a job: each restart starts the next. */
export interface JobAttempt {
  number: number;
  started_at: string;
  ended_at?: string | null;
  reason: string;
  /** The reason as the server keyed it (ADR 0011). */
  reason_said?: ServerSaid | null;
}

export interface SpecProblem extends ServerSaid {
  code?: string;
  message: string;
  field: string;
  line?: number | null;
  column?: number | null;
  severity?: 'error' | 'warning';
}

/** What one cluster's agent will create for the job (from the preview). */
export interface AgentPlan {
  cluster: string;
  known: boolean;
  online: boolean;
  gpus: number;
  roles: string[];
  workers: Array<{ role: string; index: number; rank: number; gpus: number; image: string; is_header: boolean }>;
}

export interface PreviewResult {
  /** Empty when the document could not be read or holds a secret (never echoed back). */
  yaml: string;
  errors: SpecProblem[];
  warnings: SpecProblem[];
  plan?: AgentPlan[] | unknown;
  /** Where the scheduler would place the job now, and why (ADR 0026); null when it would wait. */
  layout?: LayoutView | null;
  /** Why it would wait now, when it could fit some day. */
  pending?: PendingExplanation | null;
}

/** A placement's layout as the scheduler says it (services/scheduler/.../domain/layouts.py `layout_view`). */
export interface LayoutView {
  kind: 'named' | 'one' | 'span';
  clusters: string[];
  domain: string | null;
  roles: Array<{ role: string; clusters: string[] }>;
  rtt_ms: number | null;
  split: string[];
  apart: string[];
  message: string;
  parts: ServerSaid[];
}

export interface Template {
  id: string;
  title_en: string;
  title_zh: string;
  description_en?: string;
  description_zh?: string;
  params_schema?: { properties?: Record<string, { default?: unknown; type?: string }> ; required?: string[] };
  /** A document built from example parameters, as YAML (what the scheduler sends). */
  example_yaml?: string;
  /** The same, already decoded (older gateways / tests). */
  example?: JobDocument;
}

export interface TimelineEntry {
  seq?: number;
  kind?: string;
  at: string;
  from_status?: string | null;
  to_status: string;
  reason?: string;
  details?: Record<string, unknown>;
}

export interface PendingAlternative {
  cluster: string;
  nodes: number;
}

export interface PendingRole {
  role: string;
  cluster: string;
  selector?: string | Record<string, string>;
  needed: number;
  gpus_per_worker: number;
  in_cluster?: number;
  matching: number;
  ready: number;
  schedulable: number;
  enough: number;
  code: string;
  alternatives?: PendingAlternative[];
  message: string;
  /** The message as catalogue clauses, for other languages (ADR 0011). */
  parts?: ServerSaid[];
}

export interface PendingConflict {
  cluster: string;
  roles: string[];
  needed?: number;
  nodes?: number;
  message: string;
  parts?: ServerSaid[];
}

export interface PendingExplanation {
  code?: string;
  message?: string;
  parts?: ServerSaid[];
  roles: PendingRole[];
  conflicts?: PendingConflict[];
}

export interface Worker {
  /** The scheduler calls it `id`; the console reads either and fills `worker_id`. */
  id?: string;
  worker_id: string;
  role: string;
  index: number;
  rank?: number;
  is_header?: boolean;
  updated_at?: string;
  cluster: string;
  node?: string | null;
  address?: string | null;
  virtual_ip?: string | null;
  gpus: number;
  phase: string;
  reason?: string;
  /** The reason as the agent keyed it (ADR 0011). */
  reason_said?: ServerSaid | null;
  exit_code?: number | null;
  ray_joined?: boolean;
  ray_nodes_joined?: number | null;
  ray_nodes_expected?: number | null;
  ssh_command?: string;
}

export interface OutputFile {
  worker_id?: string;
  path: string;
  size: number;
}

export interface Job {
  id: string;
  name: string;
  owner: string;
  status: JobStatus;
  reason?: string;
  /** The reason as the server keyed it (ADR 0011). */
  reason_said?: (ServerSaid & { parts?: ServerSaid[] | null }) | null;
  priority?: number;
  network_domain?: string | null;
  clusters?: string[];
  worker_count?: number;
  gpu_count?: number;
  exit_code?: number | null;
  created_at?: string;
  updated_at?: string;
  scheduled_at?: string | null;
  started_at?: string | null;
  ended_at?: string | null;
  /** The current attempt (1 until a restart) and the restarts the policy used. */
  attempt?: number;
  restarts?: number;
  spec?: JobDocument;
  yaml?: string;
}

/** Output manifest of one worker, as the scheduler keeps it. */
export interface WorkerOutputs {
  worker_id: string;
  files: Array<{ path: string; size: number }>;
  truncated?: boolean;
}

export interface JobDetail extends Job {
  details?: Record<string, unknown>;
  pending?: PendingExplanation | null;
  warnings?: SpecProblem[];
  ray_nodes?: { joined: number; expected: number } | null;
  workers: Worker[];
  /** Every attempt, first to current. */
  attempts?: JobAttempt[];
  timeline: TimelineEntry[];
  outputs?: Array<WorkerOutputs | OutputFile>;
  tensorboard_dir?: string | null;
  /** Opens the job's TensorBoard (via the gateway's tools origin), when the job declares tensorboardDir. */
  tensorboard_url?: string | null;
  /** Opens the Header's Ray dashboard (via the tools origin), while the job runs. */
  ray_dashboard_url?: string | null;
  ssh_keys?: string[];
  /** How to reach the Header worker over SSH, once placed. */
  ssh_command?: string | null;
}

export interface JobQuery {
  status?: JobStatus;
  q?: string;
  owner?: string;
  page?: number;
  page_size?: number;
  sort?: string;
}

export interface LogLine {
  seq?: number;
  worker?: string;
  worker_id?: string;
  line: string;
  at?: string;
}

export interface AuditEntry {
  id?: string | number;
  actor?: string;
  who?: string;
  action: string;
  target?: string;
  at: string;
  details?: Record<string, unknown>;
}

export interface ApiToken {
  id: string;
  name: string;
  created_at?: string;
  last_used_at?: string | null;
}

// ----------------------------------------------------------------------------------------------
// Notifications (the notifier service)

export type EndpointKind = 'json' | 'slack' | 'feishu' | 'dingtalk';

export interface NotifyEndpoint {
  id: string;
  name: string;
  owner: string;
  kind: EndpointKind;
  url: string;
  has_secret: boolean;
  scope: 'own' | 'all';
  states: string[];
  job_ids: string[];
  language: 'en' | 'zh-CN';
  created_at: string;
}

export interface NotifyEndpointCreate {
  name: string;
  kind: EndpointKind;
  url: string;
  secret?: string;
  scope: 'own' | 'all';
  states: string[];
  job_ids: string[];
  language: 'en' | 'zh-CN';
}

export interface DeliveryAttempt {
  attempt: number;
  at: string;
  status_code: number | null;
  error: string;
  duration_ms: number;
}

export interface Delivery {
  id: number;
  event_id: string;
  job_id: string;
  to_status: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  next_attempt_at: string | null;
  last_status_code: number | null;
  last_error: string;
  created_at: string;
  finished_at: string | null;
  log: DeliveryAttempt[];
}

/** One averaged point of a worker's use (`GET /jobs/{id}/usage`, ADR 0017). */
export interface UsagePoint {
  at: string;
  cpu_cores_used: number;
  memory_bytes: number;
  gpu_count: number;
  /** Mean over the worker's GPUs; null when it holds none (or its agent cannot see them). */
  gpu_util_pct: number | null;
  gpu_memory_used_bytes: number;
  gpu_memory_total_bytes: number;
}

export interface WorkerUsageSeries {
  worker_id: string;
  role: string;
  index: number;
  attempt: number;
  points: UsagePoint[];
}

export interface JobUsage {
  job_id: string;
  since: string;
  step_s: number;
  workers: WorkerUsageSeries[];
}

/** A project's GPU quota (ADR 0020): overall, per cluster and per GPU model, plus the borrowing limit. */
export interface ProjectQuota {
  gpus: number;
  clusters: Record<string, number>;
  models: Record<string, number>;
  borrowing_limit: number;
  /** The highest spec.priority the project's jobs may ask; null: no cap. */
  max_priority?: number | null;
}

/** What a project's jobs hold now, and how many of its jobs run or wait. */
export interface ProjectUsage {
  gpus: number;
  clusters: Record<string, number>;
  models: Record<string, number>;
  running_jobs: number;
  waiting_jobs: number;
}

export interface Project {
  name: string;
  description: string;
  members: string[];
  quota: ProjectQuota;
  usage: ProjectUsage;
  created_at: string;
  updated_at: string;
  updated_by: string;
}

export interface ProjectCreate {
  name: string;
  description: string;
  members: string[];
  quota: ProjectQuota;
}

/** A waiting job in the queue (GET /queue): others' jobs come without id, name, owner or reason. */
export interface QueuedJob {
  position: number;
  mine: boolean;
  job_id: string | null;
  name: string | null;
  owner: string | null;
  project: string | null;
  priority: number;
  gpus: number;
  clusters: string[];
  waiting_since: string;
  waits_for: 'capacity' | 'quota' | 'hold';
  ahead: number;
  reason: string | null;
}

export interface QueueHint {
  kind: 'cluster' | 'gpus' | 'job_ends';
  message: string;
  message_key: string;
  params: Record<string, string | number>;
}

/** One of your waiting jobs explained (GET /queue/{id}). */
export interface QueueDetail {
  job: QueuedJob;
  jobs_ahead: QueuedJob[];
  estimated_start: string | null;
  estimate_basis: string;
  estimate_basis_said?: { message_key: string; params: Record<string, string | number> };
  hints: QueueHint[];
}
