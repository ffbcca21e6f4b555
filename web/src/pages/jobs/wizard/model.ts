/**
 * The create-job wizard's state and its pure rules: building the job document (the shape of
 * services/scheduler/.../domain/document/model.py), the checks each step makes before moving on, and which
 * step a server-reported field path belongs to. The server validates everything again; these
 * checks only stop the obvious mistakes one step earlier.
 */
import { parse as parseYaml } from 'yaml';
import type { JobDocument, MountSpec, RestartKind, RestartPolicy, RoleSpec, SpecProblem, Template } from '../../../api/types';
import { parseTerm, termsToMap } from '../../../lib/selector';
import { lineOfField } from '../../../lib/yamlPath';
import { syncedRlinfConfig } from './rlinf';

export interface EnvVar {
  name: string;
  value: string;
  /** Set (possibly still empty while being chosen): the variable comes from this named secret, and `value`
   *  is not used — the document says `NAME: {secret: name}` and the worker gets the value (ADR 0025). */
  secret?: string;
}

export interface RoleDraft {
  /** Stable identity for React and for the Header choice, so renaming a role keeps it Header. */
  id: string;
  name: string;
  replicas: number;
  gpusPerWorker: number;
  /** "" (the default): any cluster — the scheduler chooses (ADR 0026); else the cluster the role names. */
  cluster: string;
  selector: string[];
  image: string;
  prepareScript: string;
  mounts: MountSpec[];
  env: EnvVar[];
}

export interface WizardState {
  name: string;
  type: 'custom' | 'template';
  template?: string;
  headerId: string;
  roles: RoleDraft[];
  networkDomain?: string;
  sshKeys: string[];
  runScript: string;
  tensorboardDir: string;
  outputs: string[];
  priority: number;
  /** `spec.project`: the project the job is charged to; unset lets the server choose your one project. */
  project?: string;
  /** `spec.restartPolicy`: 0 restarts (the default) leaves the field out. */
  maxRestarts: number;
  restartOn: RestartKind[];
  restartExitCodes: number[];
  restartBackoffSeconds: number;
  /** `spec.resume.dir` (relative to the first output); empty leaves `spec.resume` out. */
  resumeDir: string;
  /** `spec.progressDeadlineSeconds`; null leaves it out (no stall detection). */
  progressDeadlineSeconds: number | null;
  /** `spec.terminationGracePeriodSeconds`; null leaves it out (the runtime's short default). 0 is a value. */
  terminationGracePeriodSeconds: number | null;
  /** `spec.placement.spanClusters`: true (the default, left out) lets a job whose clusters the scheduler chooses
   *  span clusters through a network domain when no single cluster fits; false writes `never` (ADR 0026). */
  spanClusters: boolean;
  rlinfConfig?: Record<string, unknown>;
}

/** `restartPolicy.on` when the user does not choose: every infrastructure failure, not a script's exit code (the server's default). */
export const DEFAULT_RESTART_ON: RestartKind[] = ['WorkerLost', 'NodeGone', 'Evicted', 'OOMKilled', 'TunnelDown', 'Stalled'];
export const MAX_RESTARTS = 100;
export const MAX_BACKOFF_SECONDS = 86_400;
/** The server's ranges for the stall deadline and the stop grace (services/scheduler/.../domain/document/lifecycle.py). */
export const MIN_PROGRESS_DEADLINE_SECONDS = 10;
export const MAX_PROGRESS_DEADLINE_SECONDS = 604_800;
export const MAX_TERMINATION_GRACE_SECONDS = 3600;

/** A problem found in the browser: `field` is the spec path, `key` an i18n key with `values`. */
export interface LocalProblem {
  field: string;
  key: string;
  values?: Record<string, unknown>;
}

let counter = 0;
export function newRoleId(): string {
  counter += 1;
  return `role-${Date.now().toString(36)}-${counter}`;
}

export function newRole(name: string, replicas = 1, gpusPerWorker = 8): RoleDraft {
  return {
    id: newRoleId(),
    name,
    replicas,
    gpusPerWorker,
    cluster: '',
    selector: [],
    image: '',
    prepareScript: '',
    mounts: [],
    env: [],
  };
}

export function initialState(): WizardState {
  const worker = newRole('worker');
  return {
    name: '',
    type: 'custom',
    headerId: worker.id,
    roles: [worker],
    sshKeys: [],
    runScript: 'python -m rlinf.run config.yaml\n',
    tensorboardDir: '',
    outputs: [],
    priority: 0,
    maxRestarts: 0,
    restartOn: [...DEFAULT_RESTART_ON],
    restartExitCodes: [],
    restartBackoffSeconds: 0,
    resumeDir: '',
    progressDeadlineSeconds: null,
    terminationGracePeriodSeconds: null,
    spanClusters: true,
  };
}

/** Whether the scheduler chooses the cluster of some role ("any cluster", ADR 0026). */
export function choosesClusters(state: WizardState): boolean {
  return state.roles.some((r) => !r.cluster);
}

/**
 * A role from a template's example: any cluster (the scheduler chooses, ADR 0026) and no selector; its image is
 * an example value, left for the user to choose; the layout, GPUs and scripts are kept.
 */
function roleFromExample(task: RoleSpec): RoleDraft {
  return {
    ...newRole(task.name, task.replicas ?? 1, task.gpusPerWorker ?? 0),
    prepareScript: task.prepareScript ?? '',
    mounts: task.mounts ?? [],
    env: envOfExample(task.env),
  };
}

/** An example's variables, in the mapping form or Kubernetes' list form (`[{name, value | secret}]`). */
function envOfExample(env: RoleSpec['env'] | Array<{ name: string; value?: string; secret?: string }>): EnvVar[] {
  const entries = Array.isArray(env)
    ? env.map((e) => [e.name, e.secret !== undefined ? { secret: e.secret } : e.value] as const)
    : Object.entries(env ?? {});
  return entries.map(([name, value]) =>
    typeof value === 'object' && value !== null ? { name, value: '', secret: value.secret } : { name, value: String(value ?? '') },
  );
}

/** The document's `env`: a value, or `{secret: name}` for a variable taken from a secret. */
function envOf(role: RoleDraft): RoleSpec['env'] {
  const named = role.env.filter((e) => e.name.trim());
  if (!named.length) return undefined;
  return Object.fromEntries(named.map((e) => [e.name.trim(), e.secret !== undefined ? { secret: e.secret.trim() } : e.value]));
}

/** The template's example document: decoded, or parsed from its YAML; null when unreadable. */
export function templateExample(template: Template): JobDocument | null {
  if (template.example?.spec?.tasks?.length) return template.example;
  if (!template.example_yaml) return null;
  try {
    const doc = parseYaml(template.example_yaml) as JobDocument | null;
    return doc?.spec?.tasks?.length ? doc : null;
  } catch {
    return null;
  }
}

/**
 * The roles a template starts with: from its example document when the gateway sends one, else
 * from its parameter names (`<role>Cluster` names a role, `<role>Nodes` its node count).
 */
export function stateFromTemplate(template: Template, previous: WizardState): WizardState {
  const base = { ...previous, type: 'template' as const, template: template.id };
  const example = templateExample(template);
  if (example) {
    const roles = example.spec.tasks.map(roleFromExample);
    const header = roles.find((r) => r.name === example.spec.header) ?? roles[0];
    return {
      ...base,
      roles,
      headerId: header.id,
      runScript: example.spec.runScript ?? previous.runScript,
      rlinfConfig: example.spec.rlinfConfig,
    };
  }
  const props = template.params_schema?.properties ?? {};
  const gpus = typeof props.gpusPerWorker?.default === 'number' ? props.gpusPerWorker.default : 8;
  const roles: RoleDraft[] = [];
  for (const key of Object.keys(props)) {
    const match = /^(.*?)Cluster$|^(cluster)$/.exec(key);
    if (!match) continue;
    const roleName = match[1] || 'worker';
    const nodes = props[`${roleName}Nodes`]?.default;
    roles.push(newRole(roleName, typeof nodes === 'number' ? nodes : 1, gpus));
  }
  if (!roles.length) return { ...base, rlinfConfig: undefined };
  return { ...base, roles, headerId: roles[0].id, rlinfConfig: undefined };
}

export function headerRole(state: WizardState): RoleDraft | undefined {
  return state.roles.find((r) => r.id === state.headerId);
}

function clean<T extends object>(value: T): T {
  return Object.fromEntries(
    Object.entries(value).filter(([, v]) => v !== undefined && v !== '' && !(Array.isArray(v) && v.length === 0)),
  ) as T;
}

/** The restart policy the wizard's fields describe; none while no restart is allowed. */
export function restartPolicyOf(state: WizardState): RestartPolicy | undefined {
  if (!state.maxRestarts) return undefined;
  return clean({
    maxRestarts: state.maxRestarts,
    on: [...state.restartOn],
    exitCodes: state.restartOn.includes('ExitCode') && state.restartExitCodes.length ? state.restartExitCodes : undefined,
    backoffSeconds: state.restartBackoffSeconds || undefined,
  });
}

export function toDocument(state: WizardState): JobDocument {
  const tasks: RoleSpec[] = state.roles.map((role) => {
    const selector = termsToMap(role.selector);
    return clean({
      name: role.name.trim(),
      cluster: role.cluster,
      nodeSelector: Object.keys(selector).length ? selector : undefined,
      replicas: role.replicas,
      gpusPerWorker: role.gpusPerWorker,
      image: role.image.trim(),
      prepareScript: role.prepareScript.trim() ? role.prepareScript : undefined,
      mounts: role.mounts.length ? role.mounts.map((m) => clean({ ...m, secretRef: m.type === 'objectStorage' ? m.secretRef : undefined })) : undefined,
      env: envOf(role),
    }) as RoleSpec;
  });
  const spec = clean({
    type: state.type,
    template: state.type === 'template' ? state.template : undefined,
    header: headerRole(state)?.name.trim(),
    networkDomain: state.networkDomain || undefined,
    sshKeys: state.sshKeys,
    runScript: state.runScript.trim() ? state.runScript : undefined,
    tensorboardDir: state.tensorboardDir.trim() || undefined,
    outputs: state.outputs,
    priority: state.priority || undefined,
    project: state.project || undefined,
    restartPolicy: restartPolicyOf(state),
    progressDeadlineSeconds: state.progressDeadlineSeconds ?? undefined,
    terminationGracePeriodSeconds: state.terminationGracePeriodSeconds ?? undefined,
    resume: state.resumeDir.trim() ? { from: 'latestCheckpoint' as const, dir: state.resumeDir.trim() } : undefined,
    placement: !state.spanClusters && choosesClusters(state) ? { spanClusters: 'never' as const } : undefined,
    rlinfConfig: syncedRlinfConfig(state),
  });
  return { apiVersion: 'rlark.io/v1', kind: 'Job', metadata: { name: state.name.trim() }, spec: { ...spec, tasks } };
}

const ROLE_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The server's limit on a job's display name, in characters after trimming. */
export const MAX_NAME_LENGTH = 128;

function nameTooLong(state: WizardState): LocalProblem[] {
  const count = state.name.trim().length;
  return count > MAX_NAME_LENGTH ? [{ field: 'metadata.name', key: 'wizard.err.nameTooLong', values: { max: MAX_NAME_LENGTH, count } }] : [];
}

export function nameProblems(state: WizardState): LocalProblem[] {
  if (!state.name.trim()) return [{ field: 'metadata.name', key: 'wizard.err.nameRequired' }];
  return nameTooLong(state);
}

/** Problems shown while the user types, before any step is checked: text past a limit is kept, never cut. */
export function liveProblems(state: WizardState): LocalProblem[] {
  return nameTooLong(state);
}

/** Step 1: a name, roles with valid unique names and node counts, and exactly one Header with 1 worker. */
export function roleStepProblems(state: WizardState): LocalProblem[] {
  const problems = nameProblems(state);
  if (!state.roles.length) problems.push({ field: 'spec.tasks', key: 'wizard.err.noRoles' });
  const seen = new Set<string>();
  state.roles.forEach((role, i) => {
    const name = role.name.trim();
    if (!name) problems.push({ field: `spec.tasks[${i}].name`, key: 'wizard.err.roleNameRequired' });
    else if (!ROLE_NAME.test(name) || name.length > 40) problems.push({ field: `spec.tasks[${i}].name`, key: 'wizard.err.roleNamePattern' });
    else if (seen.has(name)) problems.push({ field: `spec.tasks[${i}].name`, key: 'wizard.err.roleNameDuplicate', values: { name } });
    seen.add(name);
    if (!Number.isInteger(role.replicas) || role.replicas < 1) problems.push({ field: `spec.tasks[${i}].replicas`, key: 'wizard.err.replicasMin' });
  });
  const headers = state.roles.filter((r) => r.id === state.headerId);
  if (headers.length !== 1) problems.push({ field: 'spec.header', key: 'wizard.err.headerRequired' });
  else if (headers[0].replicas !== 1) {
    const index = state.roles.indexOf(headers[0]);
    problems.push({ field: `spec.tasks[${index}].replicas`, key: 'wizard.err.headerReplicas', values: { name: headers[0].name } });
  }
  return problems;
}

export function imageProblem(image: string): string | null {
  const value = image.trim();
  if (!value) return 'wizard.err.imageRequired';
  if (value.includes('@sha256:')) return null;
  const lastSegment = value.split('/').pop() ?? '';
  if (!lastSegment.includes(':')) return 'wizard.err.imageNoTag';
  if (lastSegment.endsWith(':latest')) return 'wizard.err.imageLatest';
  return null;
}

/** Step 2: every role has a pinned image, valid selector terms, GPUs, env names and each secret a variable comes
 *  from. A role may leave its cluster to the scheduler (ADR 0026). */
export function workerStepProblems(state: WizardState): LocalProblem[] {
  const problems: LocalProblem[] = [];
  state.roles.forEach((role, i) => {
    const at = `spec.tasks[${i}]`;
    const image = imageProblem(role.image);
    if (image) problems.push({ field: `${at}.image`, key: image });
    const bad = role.selector.filter((term) => !parseTerm(term));
    if (bad.length) problems.push({ field: `${at}.nodeSelector`, key: 'wizard.err.selectorTerm', values: { terms: bad.join(', ') } });
    if (!Number.isInteger(role.gpusPerWorker) || role.gpusPerWorker < 0 || role.gpusPerWorker > 64) {
      problems.push({ field: `${at}.gpusPerWorker`, key: 'wizard.err.gpusRange' });
    }
    role.env.forEach((e, j) => {
      if (e.name.trim() && !ENV_NAME.test(e.name.trim())) problems.push({ field: `${at}.env`, key: 'wizard.err.envName', values: { name: e.name, index: j } });
      else if (e.name.trim() && e.secret !== undefined && !e.secret.trim()) problems.push({ field: `${at}.env`, key: 'wizard.err.envSecret', values: { name: e.name.trim() } });
    });
    role.mounts.forEach((m) => {
      if (!m.name || !m.source || !m.path) problems.push({ field: `${at}.mounts`, key: 'wizard.err.mountIncomplete' });
      else if (!m.path.startsWith('/')) problems.push({ field: `${at}.mounts`, key: 'wizard.err.mountPath' });
    });
  });
  return problems;
}

/** Step 3: absolute TensorBoard and output paths, the restart policy's, deadline's and grace's ranges, a relative resume directory. */
export function commonStepProblems(state: WizardState): LocalProblem[] {
  const problems: LocalProblem[] = [];
  if (state.tensorboardDir.trim() && !state.tensorboardDir.trim().startsWith('/')) {
    problems.push({ field: 'spec.tensorboardDir', key: 'wizard.err.absolutePath' });
  }
  if (state.outputs.some((o) => !o.startsWith('/'))) problems.push({ field: 'spec.outputs', key: 'wizard.err.absolutePath' });
  if (!Number.isInteger(state.maxRestarts) || state.maxRestarts < 0 || state.maxRestarts > MAX_RESTARTS) {
    problems.push({ field: 'spec.restartPolicy.maxRestarts', key: 'wizard.err.maxRestartsRange', values: { max: MAX_RESTARTS } });
  }
  if (!Number.isInteger(state.restartBackoffSeconds) || state.restartBackoffSeconds < 0 || state.restartBackoffSeconds > MAX_BACKOFF_SECONDS) {
    problems.push({ field: 'spec.restartPolicy.backoffSeconds', key: 'wizard.err.backoffRange', values: { max: MAX_BACKOFF_SECONDS } });
  }
  const deadline = state.progressDeadlineSeconds;
  if (deadline !== null && (!Number.isInteger(deadline) || deadline < MIN_PROGRESS_DEADLINE_SECONDS || deadline > MAX_PROGRESS_DEADLINE_SECONDS)) {
    problems.push({ field: 'spec.progressDeadlineSeconds', key: 'wizard.err.secondsRange', values: { min: MIN_PROGRESS_DEADLINE_SECONDS, max: MAX_PROGRESS_DEADLINE_SECONDS } });
  }
  const grace = state.terminationGracePeriodSeconds;
  if (grace !== null && (!Number.isInteger(grace) || grace < 0 || grace > MAX_TERMINATION_GRACE_SECONDS)) {
    problems.push({ field: 'spec.terminationGracePeriodSeconds', key: 'wizard.err.secondsRange', values: { min: 0, max: MAX_TERMINATION_GRACE_SECONDS } });
  }
  const resumeDir = state.resumeDir.trim();
  if (resumeDir && (resumeDir.startsWith('/') || resumeDir.split('/').includes('..') || resumeDir.includes('\\'))) {
    problems.push({ field: 'spec.resume.dir', key: 'wizard.err.resumeDir' });
  } else if (resumeDir && !state.outputs.length) {
    problems.push({ field: 'spec.resume.dir', key: 'wizard.err.resumeNeedsOutputs' });
  }
  state.restartExitCodes.forEach((code, i) => {
    if (!Number.isInteger(code) || code < 1 || code > 255) {
      problems.push({ field: `spec.restartPolicy.exitCodes[${i}]`, key: 'wizard.err.exitCodeRange', values: { code } });
    }
  });
  return problems;
}

const ROLE_STEP_FIELDS = new Set(['name', 'replicas']);

/** The wizard step (0..3) where the input behind a spec field path lives. */
export function stepForField(field: string): number {
  if (!field) return 3;
  if (field.startsWith('metadata') || field === 'spec.header' || field === 'spec.type' || field === 'spec.template' || field === 'spec.tasks') return 0;
  const task = /^spec\.tasks\[(\d+)\](?:\.([A-Za-z]+))?/.exec(field);
  if (task) return task[2] && ROLE_STEP_FIELDS.has(task[2]) ? 0 : 1;
  if (field.startsWith('spec.rlinfConfig')) return 3;
  if (field.startsWith('spec.')) return 2;
  return 3;
}

/** The role index a field path points into, if any. */
export function roleIndexOf(field: string): number | null {
  const match = /^spec\.tasks\[(\d+)\]/.exec(field);
  return match ? Number(match[1]) : null;
}

/** Problems whose field is `prefix` or lies under it. */
export function problemsUnder<T extends { field: string }>(problems: T[], prefix: string): T[] {
  return problems.filter((p) => p.field === prefix || p.field.startsWith(`${prefix}.`) || p.field.startsWith(`${prefix}[`));
}

/**
 * The server's problems with each line taken from `yaml`, the YAML the preview shows: the wizard
 * sends JSON, so the server's own line numbers count lines of that (all "line 1").
 */
export function serverProblemsFrom(problems: SpecProblem[] | undefined, yaml: string): SpecProblem[] {
  return (problems ?? [])
    .filter((p) => p && typeof p.message === 'string')
    .map((p) => ({ ...p, line: p.field ? lineOfField(yaml, p.field) : null }));
}
