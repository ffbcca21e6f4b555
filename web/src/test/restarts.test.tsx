import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import JobDetail from '../pages/jobs/JobDetail';
import JobWizard from '../pages/jobs/JobWizard';
import { commonStepProblems, DEFAULT_RESTART_ON, initialState, stepForField, toDocument, type WizardState } from '../pages/jobs/wizard/model';
import { mockApi, renderPage } from './helpers';

/** Restart attempts in the console (ADR 0014): the wizard writes spec.restartPolicy, the job page lists attempts. */

function solo(extra: Partial<WizardState> = {}): WizardState {
  const state = initialState();
  return { ...state, name: 'solo', roles: [{ ...state.roles[0], cluster: 'gpu-a', image: 'r/rlinf:v1' }], ...extra };
}

describe('wizard resume (ADR 0015)', () => {
  it('writes spec.resume from the checkpoints directory and leaves it out when empty', () => {
    expect(toDocument(solo()).spec.resume).toBeUndefined();
    const doc = toDocument(solo({ outputs: ['/outputs'], resumeDir: ' exp/checkpoints ' }));
    expect(doc.spec.resume).toEqual({ from: 'latestCheckpoint', dir: 'exp/checkpoints' });
  });

  it('names spec.resume.dir for an absolute or escaping path, or without an output', () => {
    for (const resumeDir of ['/outputs/ckpt', 'exp/../../etc']) {
      expect(commonStepProblems(solo({ outputs: ['/outputs'], resumeDir })).map((p) => [p.field, p.key])).toEqual([
        ['spec.resume.dir', 'wizard.err.resumeDir'],
      ]);
    }
    expect(commonStepProblems(solo({ resumeDir: 'ckpt' })).map((p) => p.key)).toEqual(['wizard.err.resumeNeedsOutputs']);
    expect(commonStepProblems(solo({ outputs: ['/outputs'], resumeDir: 'exp/checkpoints' }))).toEqual([]);
    expect(stepForField('spec.resume.dir')).toBe(2);
  });
});

describe('wizard restart policy', () => {
  it('leaves restartPolicy out while no restart is allowed', () => {
    expect(toDocument(solo()).spec.restartPolicy).toBeUndefined();
  });

  it('writes maxRestarts, the failure kinds, exit codes with ExitCode only, and the backoff', () => {
    const doc = toDocument(solo({ maxRestarts: 2, restartOn: ['WorkerLost', 'ExitCode'], restartExitCodes: [75], restartBackoffSeconds: 30 }));
    expect(doc.spec.restartPolicy).toEqual({ maxRestarts: 2, on: ['WorkerLost', 'ExitCode'], exitCodes: [75], backoffSeconds: 30 });
    const noExitCode = toDocument(solo({ maxRestarts: 1, restartOn: ['NodeGone'], restartExitCodes: [75] }));
    expect(noExitCode.spec.restartPolicy).toEqual({ maxRestarts: 1, on: ['NodeGone'] });
  });

  it('starts from the server default kinds: every infrastructure failure, not exit codes', () => {
    expect(initialState().restartOn).toEqual(DEFAULT_RESTART_ON);
    expect(DEFAULT_RESTART_ON).not.toContain('ExitCode');
    expect(DEFAULT_RESTART_ON).toContain('Stalled');
  });

  it('names the field of an out-of-range value, on the common step', () => {
    const problems = commonStepProblems(solo({ maxRestarts: 101, restartBackoffSeconds: -1, restartOn: ['ExitCode'], restartExitCodes: [3, 0] }));
    expect(problems.map((p) => p.field)).toEqual([
      'spec.restartPolicy.maxRestarts',
      'spec.restartPolicy.backoffSeconds',
      'spec.restartPolicy.exitCodes[1]',
    ]);
    expect(stepForField('spec.restartPolicy.on[1]')).toBe(2);
    expect(commonStepProblems(solo({ maxRestarts: 3 }))).toEqual([]);
  });

  it('sends the restart policy chosen on the common step to the preview', async () => {
    const { calls } = mockApi({
      'GET /api/v1/templates': { items: [] },
      'GET /api/v1/clusters': { total: 1, page: 1, page_size: 50, items: [{ name: 'gpu-a', online: true, summary: { nodes_total: 4, nodes_online: 4, gpus_total: 32, gpus_free: 16, running_jobs: 0 } }] },
      'GET /api/v1/domains': { total: 0, page: 1, page_size: 50, items: [] },
      'GET /api/v1/keys': { total: 0, page: 1, page_size: 50, items: [] },
      'POST /api/v1/jobs:preview': { yaml: 'apiVersion: rlark.io/v1\n', errors: [], warnings: [] },
    });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'solo' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    fireEvent.mouseDown(screen.getByTestId('role-cluster-0').querySelector('input') as HTMLElement);
    fireEvent.click(await screen.findByText(/gpu-a ·/));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    const restarts = screen.getByTestId('common-max-restarts').querySelector('input') ?? screen.getByTestId('common-max-restarts');
    fireEvent.change(restarts, { target: { value: '2' } });
    fireEvent.blur(restarts);
    fireEvent.click(screen.getByTestId('wizard-next'));
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: { restartPolicy?: { maxRestarts: number; on: string[] } } };
    expect(body.spec.restartPolicy?.maxRestarts).toBe(2);
    expect(body.spec.restartPolicy?.on).toEqual(DEFAULT_RESTART_ON);
  });
});

const RESTARTED = {
  id: 'job-1',
  name: 'grpo',
  owner: 'alice',
  status: 'Running',
  reason: 'all 3 Ray nodes joined; the run script started',
  priority: 0,
  network_domain: null,
  clusters: ['lab'],
  worker_count: 1,
  gpu_count: 0,
  exit_code: null,
  created_at: '2026-11-29T10:00:00Z',
  updated_at: '2026-11-29T10:09:00Z',
  scheduled_at: '2026-11-29T10:06:00Z',
  started_at: '2026-11-29T10:01:00Z',
  ended_at: null,
  attempt: 2,
  restarts: 1,
  attempts: [
    {
      number: 1,
      started_at: '2026-11-29T10:00:00Z',
      ended_at: '2026-11-29T10:05:00Z',
      reason: 'worker job-1-rollout-1: killed by signal 9',
      reason_said: { message_key: 'job.failed.reported.worker', params: { worker: 'job-1-rollout-1', reason: 'killed by signal 9' } },
    },
    { number: 2, started_at: '2026-11-29T10:05:00Z', ended_at: null, reason: '' },
  ],
  details: {},
  pending: null,
  warnings: [],
  ray_nodes: null,
  workers: [
    { id: 'job-1-actor-0-a2', attempt: 2, role: 'actor', index: 0, rank: 0, is_header: true, cluster: 'lab', node: 'n1', address: '', virtual_ip: null, gpus: 0, phase: 'Running', ray_joined: true, exit_code: null, reason: '', updated_at: '2026-11-29T10:09:00Z' },
  ],
  timeline: [],
  outputs: [],
  tensorboard_dir: null,
  ssh_keys: [],
  ssh_command: null,
  spec: { apiVersion: 'rlark.io/v1', kind: 'Job', metadata: { name: 'grpo' }, spec: { header: 'actor', restartPolicy: { maxRestarts: 3 }, tasks: [] } },
  yaml: 'apiVersion: rlark.io/v1\n',
};

describe('job detail attempts', () => {
  it('says the attempt with the restarts used and lists every attempt with why it ended', async () => {
    mockApi({ 'GET /api/v1/jobs/job-1': RESTARTED });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    expect(await screen.findByTestId('job-attempt')).toHaveTextContent('第 2 次（已用 1/3 次重启）'); // the console starts in Chinese
    fireEvent.click(screen.getByRole('tab', { name: '尝试记录' }));
    const table = await screen.findByTestId('attempts-table');
    expect(table).toHaveTextContent('工作节点 job-1-rollout-1：killed by signal 9'); // said from its key, in Chinese
    expect(table.querySelectorAll('tbody tr')).toHaveLength(2);
  });

  it('shows no attempts for a job without a restart policy that never restarted', async () => {
    mockApi({ 'GET /api/v1/jobs/job-1': { ...RESTARTED, attempt: 1, restarts: 0, attempts: RESTARTED.attempts.slice(1), spec: { ...RESTARTED.spec, spec: { header: 'actor', tasks: [] } } } });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    await screen.findByTestId('workers-table');
    expect(screen.queryByTestId('job-attempt')).toBeNull();
    expect(screen.queryByRole('tab', { name: '尝试记录' })).toBeNull();
  });
});
