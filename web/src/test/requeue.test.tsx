import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import type { User } from '../api/types';
import JobDetail from '../pages/jobs/JobDetail';
import JobWizard from '../pages/jobs/JobWizard';
import { commonStepProblems, initialState, stepForField, toDocument, type WizardState } from '../pages/jobs/wizard/model';
import { mockApi, renderPage } from './helpers';

/** Stall deadline, stop grace and requeue in the console (ADR 0014 items 3 and 4). */

function solo(extra: Partial<WizardState> = {}): WizardState {
  const state = initialState();
  return { ...state, name: 'solo', roles: [{ ...state.roles[0], cluster: 'gpu-a', image: 'r/rlinf:v1' }], ...extra };
}

describe('wizard progress deadline and stop grace', () => {
  it('writes both fields only when set, a grace of 0 included', () => {
    const unset = toDocument(solo()).spec;
    expect('progressDeadlineSeconds' in unset).toBe(false);
    expect('terminationGracePeriodSeconds' in unset).toBe(false);
    const set = toDocument(solo({ progressDeadlineSeconds: 1800, terminationGracePeriodSeconds: 120 })).spec;
    expect([set.progressDeadlineSeconds, set.terminationGracePeriodSeconds]).toEqual([1800, 120]);
    expect(toDocument(solo({ terminationGracePeriodSeconds: 0 })).spec.terminationGracePeriodSeconds).toBe(0);
  });

  it("checks the server's ranges naming each field, on the common step", () => {
    const problems = commonStepProblems(solo({ progressDeadlineSeconds: 9, terminationGracePeriodSeconds: 3601 }));
    expect(problems.map((p) => [p.field, p.key, p.values])).toEqual([
      ['spec.progressDeadlineSeconds', 'wizard.err.secondsRange', { min: 10, max: 604_800 }],
      ['spec.terminationGracePeriodSeconds', 'wizard.err.secondsRange', { min: 0, max: 3600 }],
    ]);
    expect(commonStepProblems(solo({ progressDeadlineSeconds: 604_801 })).map((p) => p.field)).toEqual(['spec.progressDeadlineSeconds']);
    expect(commonStepProblems(solo({ progressDeadlineSeconds: 10, terminationGracePeriodSeconds: 0 }))).toEqual([]);
    expect(stepForField('spec.progressDeadlineSeconds')).toBe(2);
    expect(stepForField('spec.terminationGracePeriodSeconds')).toBe(2);
  });

  it('sends the deadline and grace typed on the common step to the preview', async () => {
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
    for (const [testId, value] of [['common-progress-deadline', '1800'], ['common-termination-grace', '120']]) {
      const input = screen.getByTestId(testId).querySelector('input') ?? screen.getByTestId(testId);
      fireEvent.change(input, { target: { value } });
      fireEvent.blur(input);
    }
    fireEvent.click(screen.getByTestId('wizard-next'));
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: Record<string, unknown> };
    expect(body.spec.progressDeadlineSeconds).toBe(1800);
    expect(body.spec.terminationGracePeriodSeconds).toBe(120);
  });
});

const RUNNING = {
  id: 'job-1',
  name: 'grpo',
  owner: 'alice',
  status: 'Running',
  reason: 'all Ray nodes joined; the run script started',
  priority: 0,
  network_domain: null,
  clusters: ['lab'],
  worker_count: 1,
  gpu_count: 0,
  exit_code: null,
  created_at: '2026-11-29T10:00:00Z',
  updated_at: '2026-11-29T10:05:00Z',
  scheduled_at: '2026-11-29T10:00:01Z',
  started_at: '2026-11-29T10:01:00Z',
  ended_at: null,
  details: {},
  pending: null,
  warnings: [],
  ray_nodes: null,
  workers: [
    { id: 'job-1-actor-0', role: 'actor', index: 0, rank: 0, is_header: true, cluster: 'lab', node: 'n1', address: '', virtual_ip: null, gpus: 0, phase: 'Running', ray_joined: true, exit_code: null, reason: '', updated_at: '2026-11-29T10:05:00Z' },
  ],
  timeline: [],
  outputs: [],
  tensorboard_dir: null,
  ssh_keys: [],
  ssh_command: null,
  spec: { apiVersion: 'rlark.io/v1', kind: 'Job', metadata: { name: 'grpo' }, spec: { header: 'actor', tasks: [] } },
  yaml: 'apiVersion: rlark.io/v1\n',
};

function confirmPopup() {
  const confirm = screen.getByRole('tooltip');
  fireEvent.click(within(confirm).getAllByRole('button').at(-1)!);
}

describe('job detail requeue', () => {
  it('explains the requeue, posts it after the confirmation and reads the job again', async () => {
    const { calls } = mockApi({
      'GET /api/v1/jobs/job-1': RUNNING,
      'POST /api/v1/jobs/job-1:requeue': { ...RUNNING, status: 'Pending', reason: 'attempt 2 starts after a requeue by alice' },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    fireEvent.click(await screen.findByTestId('requeue-job'));
    const confirm = await screen.findByRole('tooltip');
    expect(confirm).toHaveTextContent('SIGTERM'); // the console starts in Chinese; the hint names the signal and spec.resume
    expect(confirm).toHaveTextContent('spec.resume');
    expect(calls.some((c) => c.method === 'POST')).toBe(false);
    const reads = calls.filter((c) => c.method === 'GET' && c.path === '/api/v1/jobs/job-1').length;
    confirmPopup();
    await waitFor(() => expect(calls.filter((c) => c.method === 'POST').map((c) => c.path)).toEqual(['/api/v1/jobs/job-1:requeue']));
    await waitFor(() => expect(calls.filter((c) => c.method === 'GET' && c.path === '/api/v1/jobs/job-1').length).toBeGreaterThan(reads));
  });

  it("shows the server's refusal in the console's language", async () => {
    mockApi({
      'GET /api/v1/jobs/job-1': RUNNING,
      // As the scheduler answers (handlers/requests.py): the English message plus its catalogue key and params.
      'POST /api/v1/jobs/job-1:requeue': {
        status: 409,
        body: {
          error: {
            code: 'job_not_placed',
            message: 'job job-1 is Pending: only a placed job (Scheduled, Starting, Running) can be requeued',
            field: 'job_id',
            message_key: 'job_not_placed',
            params: { job: 'job-1', status: 'Pending' },
          },
        },
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    fireEvent.click(await screen.findByTestId('requeue-job'));
    await screen.findByRole('tooltip');
    confirmPopup();
    expect(await screen.findByText('作业 job-1 处于 Pending 状态：只有已放置的作业（Scheduled、Starting、Running）可以重新排队')).toBeInTheDocument();
  });

  it('is offered for a placed job only, and not to a user who does not own it', async () => {
    for (const status of ['Scheduled', 'Starting']) {
      mockApi({ 'GET /api/v1/jobs/job-1': { ...RUNNING, status } });
      const page = renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
      expect(await screen.findByTestId('requeue-job')).toBeInTheDocument();
      page.unmount();
    }
    for (const status of ['Pending', 'Succeeded', 'Failed']) {
      mockApi({ 'GET /api/v1/jobs/job-1': { ...RUNNING, status, workers: [] } });
      const page = renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
      await screen.findByTestId('workers-table');
      expect(screen.queryByTestId('requeue-job')).toBeNull();
      page.unmount();
    }
    mockApi({ 'GET /api/v1/jobs/job-1': RUNNING });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id', user: { username: 'bob', role: 'user' } as User });
    await screen.findByTestId('workers-table');
    expect(screen.queryByTestId('requeue-job')).toBeNull();
  });
});
