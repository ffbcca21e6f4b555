/**
 * Fixes from the outside-in walk-through (issue 15, item 6): labels shown as they are, colour codes
 * in logs, wizard errors on the line of their field, Pending texts only while Pending, the admin
 * page closed to users, a job name past its limit kept and explained, and a key that jobs use deleted
 * only after the console listed them and asked.
 */
import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it, vi } from 'vitest';
import App from '../App';
import i18n from '../i18n';
import { ansiRuns, stripAnsi } from '../lib/ansi';
import { lineOfField, pathSegments } from '../lib/yamlPath';
import ClusterDetail from '../pages/ClusterDetail';
import Keys from '../pages/Keys';
import JobDetail from '../pages/jobs/JobDetail';
import JobWizard from '../pages/jobs/JobWizard';
import LogViewer from '../pages/jobs/LogViewer';
import { serverProblemsFrom } from '../pages/jobs/wizard/model';
import { apiError, mockApi, renderApp, renderPage } from './helpers';

const PAGE = { total: 1, page: 1, page_size: 50 };

describe('node labels', () => {
  it('keep their rlark.io/ prefix in the cluster page, as a node selector must name them', async () => {
    await i18n.changeLanguage('en');
    const node = {
      cluster: 'local', name: 'n0', status: 'ready', ready: true, schedulable: true, gone: false,
      gpu_count: 8, gpu_model: 'A100', gpu_allocatable: 8, gpu_allocated: 0, gpu_allocated_foreign: 0, gpu_free: 8,
      labels: { 'rlark.io/gpu-model': 'A100', 'rlark.io/node-category': 'train' }, workers: [],
    };
    mockApi({
      'GET /api/v1/clusters/local': { name: 'local', online: true, runtime: 'local', summary: {} },
      'GET /api/v1/nodes': { total: 1, page: 1, page_size: 20, items: [node] },
      'GET /api/v1/labels': { items: [] },
    });
    renderPage(<ClusterDetail />, { route: '/clusters/local', path: '/clusters/:name' });
    const row = (await screen.findByText('n0')).closest('tr') as HTMLElement;
    expect(within(row).getByText('rlark.io/gpu-model=A100')).toBeInTheDocument();
    expect(within(row).getByText('rlark.io/node-category=train')).toBeInTheDocument();
    expect(within(row).queryByText('gpu-model=A100')).not.toBeInTheDocument();
  });
});

describe('ANSI escapes in logs', () => {
  it('become coloured runs and leave no escape bytes behind', () => {
    const runs = ansiRuns('\x1b[1;31mERROR\x1b[0m step 3 \x1b[2K\x1b]0;title\x07done \x1b[?25h');
    expect(runs.map((r) => r.text).join('')).toBe('ERROR step 3 done ');
    expect(runs[0]).toEqual({ text: 'ERROR', style: { color: 'rgb(187, 0, 0)', fontWeight: 'bold' } });
    expect(runs.slice(1).every((r) => r.style === undefined)).toBe(true);
    expect(stripAnsi('\x1b[32mok\x1b[39m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\')).toBe('ok link');
    expect(ansiRuns('plain')).toEqual([{ text: 'plain' }]);
  });

  /** The log viewer of a finished worker whose stored log is `text`. */
  async function storedLog(text: string): Promise<HTMLElement> {
    await i18n.changeLanguage('en');
    vi.stubGlobal('fetch', vi.fn(async () => new Response(text, { status: 200, headers: { 'Content-Type': 'text/plain' } })));
    const worker = { worker_id: 'w-0', role: 'actor', index: 0, cluster: 'c', gpus: 8, phase: 'succeeded' };
    renderPage(<LogViewer jobId="job-1" workers={[worker]} active={false} />);
    return screen.findByTestId('log-view');
  }

  it('the log viewer shows colours, never the escape codes', async () => {
    const view = await storedLog('\x1b[32mINFO\x1b[0m started\n\x1b[33mWARN\x1b[0m slow\n');
    await waitFor(() => expect(view).toHaveTextContent('INFO started WARN slow'));
    expect(view.textContent).not.toContain('\x1b');
    expect(view.textContent).not.toMatch(/\[\d+m/);
    expect(within(view).getByText('INFO')).toHaveStyle({ color: 'rgb(0, 187, 0)' });
  });

  it('hides the bootstrap\'s ##rlark lines until asked for', async () => {
    const view = await storedLog('step 1\n##rlark {"event":"run_started"}\nstep 2\n');
    await waitFor(() => expect(view.textContent).toBe('step 1\nstep 2'));
    fireEvent.click(screen.getByTestId('log-markers'));
    await waitFor(() => expect(view.textContent).toBe('step 1\n##rlark {"event":"run_started"}\nstep 2'));
  });
});

const YAML = `apiVersion: rlark.io/v1
kind: Job
metadata:
  name: grpo
spec:
  header: actor
  tasks:
    - name: actor
      cluster: gpu-a
      image: r/rlinf:latest
    - name: rollout
      nodeSelector:
        rlark.io/gpu-model: A100
  env:
    MY-VAR: "1"
`;

describe('lines of server errors', () => {
  it('are the lines of the fields the errors name, or of their nearest ancestor', () => {
    expect(pathSegments('spec.tasks[1].nodeSelector["rlark.io/gpu-model"]')).toEqual(['spec', 'tasks', 1, 'nodeSelector', 'rlark.io/gpu-model']);
    expect(pathSegments('spec..x')).toBeNull();
    expect(lineOfField(YAML, 'metadata.name')).toBe(4);
    expect(lineOfField(YAML, 'spec.tasks[0].image')).toBe(10);
    expect(lineOfField(YAML, 'spec.tasks[1]')).toBe(11);
    expect(lineOfField(YAML, 'spec.tasks[1].nodeSelector')).toBe(12);
    expect(lineOfField(YAML, 'spec.tasks[1].nodeSelector["rlark.io/gpu-model"]')).toBe(13);
    expect(lineOfField(YAML, 'spec.env["MY-VAR"]')).toBe(15);
    // A missing field: the line of the part of it that is there.
    expect(lineOfField(YAML, 'spec.tasks[1].image')).toBe(11);
    expect(lineOfField(': [', 'spec')).toBeNull();
  });

  it('replace the server line counted in the JSON the wizard sent', () => {
    const problems = serverProblemsFrom([{ code: 'image_tag_latest', message: 'latest tag', field: 'spec.tasks[0].image', line: 1 }, { message: 'whole', field: '', line: 1 }], YAML);
    expect(problems.map((p) => p.line)).toEqual([10, null]);
  });

  it('in the wizard preview, point at the line of their field in the YAML shown', async () => {
    await i18n.changeLanguage('en');
    mockApi({
      'GET /api/v1/templates': { items: [] },
      'GET /api/v1/clusters': { ...PAGE, items: [{ name: 'gpu-a', online: true, summary: { nodes_total: 4, nodes_online: 4, gpus_total: 32, gpus_free: 16, running_jobs: 1 } }] },
      'GET /api/v1/domains': { ...PAGE, items: [] },
      'GET /api/v1/keys': { ...PAGE, items: [] },
      'POST /api/v1/jobs:preview': {
        yaml: YAML,
        errors: [
          { code: 'image_tag_latest', message: 'image uses the latest tag', field: 'spec.tasks[0].image', line: 1 },
          { code: 'x', message: 'selector is wrong', field: 'spec.tasks[1].nodeSelector', line: 1 },
        ],
        warnings: [],
      },
    });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'grpo' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/gpu-a ·/));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    fireEvent.click(screen.getByTestId('wizard-next'));
    const errors = await screen.findByTestId('preview-errors');
    const items = within(errors).getAllByRole('listitem');
    expect(items[0]).toHaveTextContent('line 10');
    expect(items[1]).toHaveTextContent('line 12');
    expect(errors).not.toHaveTextContent('line 1 ');
  });
});

const ENDED = {
  id: 'job-9', name: 'grpo', owner: 'alice', status: 'Failed', reason: 'worker actor-0 exited with 1', priority: 0,
  network_domain: null, clusters: ['gpu-a'], worker_count: 1, gpu_count: 8, exit_code: 1,
  created_at: '2026-11-29T10:00:00Z', updated_at: '2026-11-29T10:05:00Z', started_at: null, ended_at: '2026-11-29T10:05:00Z',
  details: {},
  pending: {
    code: 'too_few_nodes_with_enough_gpus', message: 'role "actor" needs 1 node',
    roles: [{ role: 'actor', cluster: 'gpu-a', selector: {}, needed: 1, gpus_per_worker: 8, matching: 1, ready: 1, schedulable: 1, enough: 0, code: 'x', message: 'waiting for GPUs' }],
  },
  warnings: [
    { code: 'selector_matches_too_few', severity: 'warning', field: 'spec.tasks[0].nodeSelector', message: 'only 0 can take a worker now; the job stays Pending until enough nodes are ready' },
    { code: 'output_not_on_mount', severity: 'warning', field: 'spec.outputs[0]', message: 'files written there are lost when the worker stops' },
  ],
  ray_nodes: null, workers: [], timeline: [], outputs: [],
  spec: { apiVersion: 'rlark.io/v1', kind: 'Job', metadata: { name: 'grpo' }, spec: { header: 'actor', tasks: [] } },
};

describe('texts about waiting', () => {
  it.each(['Failed', 'Succeeded', 'Cancelled'])('are gone once the job is %s; other warnings stay', async (status) => {
    mockApi({ 'GET /api/v1/jobs/job-9': { ...ENDED, status } });
    renderPage(<JobDetail />, { route: '/jobs/job-9', path: '/jobs/:id' });
    const warnings = await screen.findByTestId('job-warnings');
    expect(warnings).toHaveTextContent('files written there are lost');
    expect(warnings).not.toHaveTextContent('stays Pending');
    expect(screen.queryByTestId('pending-explanation')).not.toBeInTheDocument();
  });

  it('show while the job is Pending', async () => {
    mockApi({ 'GET /api/v1/jobs/job-9': { ...ENDED, status: 'Pending', reason: 'waiting' } });
    renderPage(<JobDetail />, { route: '/jobs/job-9', path: '/jobs/:id' });
    expect(await screen.findByTestId('job-warnings')).toHaveTextContent('the job stays Pending');
    expect(screen.getByTestId('pending-explanation')).toHaveTextContent('waiting for GPUs');
  });
});

describe('the admin page', () => {
  it('tells a user who opens it by URL that it is for administrators', async () => {
    await i18n.changeLanguage('en');
    const { calls } = mockApi({
      'GET /api/v1/auth/me': { username: 'bob', role: 'user' },
      'GET /api/v1/clusters': apiError(403, 'forbidden', 'admins only'),
      'GET /api/v1/users': apiError(403, 'forbidden', 'admins only'),
    });
    renderApp('/admin/users', <App />);
    expect(await screen.findByTestId('forbidden', {}, { timeout: 10000 })).toHaveTextContent('This page is for administrators only');
    expect(screen.getByText('403')).toBeInTheDocument();
    expect(calls.some((c) => c.path === '/api/v1/users')).toBe(false);
  });

  it('opens for an admin', async () => {
    await i18n.changeLanguage('en');
    mockApi({
      'GET /api/v1/auth/me': { username: 'root', role: 'admin' },
      'GET /api/v1/clusters': { total: 0, page: 1, page_size: 50, items: [] },
      'GET /api/v1/users': { total: 0, page: 1, page_size: 50, items: [] },
    });
    renderApp('/admin', <App />);
    expect(await screen.findByText('Administration', {}, { timeout: 10000 })).toBeInTheDocument();
    expect(screen.queryByTestId('forbidden')).not.toBeInTheDocument();
  });
});

describe('a job name past 128 characters', () => {
  it('is kept whole and explained with the limit and the count', async () => {
    await i18n.changeLanguage('en');
    mockApi({ 'GET /api/v1/templates': { items: [] } });
    renderPage(<JobWizard />);
    const input = screen.getByTestId('wizard-name') as HTMLInputElement;
    fireEvent.change(input, { target: { value: 'x'.repeat(129) } });
    expect(input.value).toHaveLength(129);
    expect(await screen.findByTestId('field-error-metadata.name')).toHaveTextContent('At most 128 characters: this name has 129');
    fireEvent.change(input, { target: { value: 'x'.repeat(128) } });
    await waitFor(() => expect(screen.queryByTestId('field-error-metadata.name')).not.toBeInTheDocument());
  });
});

describe('deleting a key jobs use', () => {
  const KEY = { id: 'k1', name: 'laptop', owner: 'alice', key_type: 'ssh-ed25519', bits: 256, fingerprint: 'SHA256:x', comment: '', public_key: 'ssh-ed25519 AAAA', created_at: '2026-11-29T10:00:00Z' };
  const IN_USE = apiError(409, 'key_in_use', 'the key is used by 3 pending or running jobs', 'key_id');
  (IN_USE.body as { error: Record<string, unknown> }).error.details = {
    key_id: 'k1',
    total: 3,
    jobs: [
      { id: 'job-1', name: 'grpo', status: 'Running' },
      { id: 'job-2', name: 'sft', status: 'Pending' },
    ],
  };

  it('lists the jobs and deletes only when asked to delete anyway', async () => {
    await i18n.changeLanguage('en');
    const { calls } = mockApi({
      'GET /api/v1/keys': { items: [KEY], total: 1, page: 1, page_size: 50 },
      'DELETE /api/v1/keys/k1': ({ url }: { url: URL }) => (url.searchParams.get('force') === 'true' ? { status: 204 } : IN_USE),
    });
    renderPage(<Keys />);
    const row = (await screen.findByText('laptop')).closest('tr') as HTMLElement;
    fireEvent.click(within(row).getByRole('button', { name: /delete/i }));
    const confirm = await screen.findByRole('tooltip');
    fireEvent.click(within(confirm).getAllByRole('button').at(-1)!);

    const inUse = await screen.findByTestId('key-in-use');
    expect(inUse).toHaveTextContent('3 pending or running jobs use this key');
    expect(within(inUse).getByRole('link', { name: 'grpo' })).toHaveAttribute('href', '/jobs/job-1');
    expect(inUse).toHaveTextContent('job-2');
    expect(inUse).toHaveTextContent('and 1 more');
    const deletes = () => calls.filter((c) => c.method === 'DELETE').map((c) => c.query.get('force'));
    expect(deletes()).toEqual([null]);

    fireEvent.click(screen.getByTestId('key-delete-force'));
    await waitFor(() => expect(deletes()).toEqual([null, 'true']));
    await waitFor(() => expect(screen.queryByTestId('key-in-use')).not.toBeInTheDocument());
  });
});
