import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import JobDetail, { sshCommandOf, sshConfigCommandOf } from '../pages/jobs/JobDetail';
import { RUNNING } from './fixtures/job';
import { mockApi, renderPage } from './helpers';

describe('job detail', () => {
  it('shows workers, Ray joins, SSH commands, outputs and the timeline from the scheduler', async () => {
    const { calls } = mockApi({
      'GET /api/v1/jobs/job-1': RUNNING,
      'POST /api/v1/jobs/job-1:cancel': { ...RUNNING, status: 'Cancelled' },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    const workers = await screen.findByTestId('workers-table');
    expect(workers).toHaveTextContent('actor-0');
    expect(workers).toHaveTextContent('Header');
    expect(workers).toHaveTextContent('2/2');
    // Through the platform: the workers' own addresses are not reachable from the user's machine.
    expect(screen.getByTestId('ssh-w-0')).toHaveTextContent('rlark ssh job-1/actor-0');
    expect(screen.getByTestId('ssh-w-1')).toHaveTextContent('rlark ssh job-1/rollout-0');
    expect(screen.getByTestId('job-timeline')).toHaveTextContent('all Ray nodes joined');
    expect(screen.getByTestId('job-ssh')).toHaveTextContent('rlark ssh job-1');
    expect(screen.getByTestId('job-ssh-config')).toHaveTextContent('rlark ssh-config job-1 >> ~/.ssh/config');
    expect(screen.queryByText(/ssh rlark@/)).toBeNull();

    fireEvent.click(screen.getByRole('tab', { name: /输出/ }));
    const outputs = await screen.findByTestId('outputs-table');
    expect(outputs).toHaveTextContent('/data/outputs/ckpt-100.pt');
    expect(outputs).toHaveTextContent('2.0 KiB');

    fireEvent.click(screen.getByTestId('cancel-job'));
    const confirm = await screen.findByRole('tooltip');
    fireEvent.click(within(confirm).getAllByRole('button').at(-1)!);
    await waitFor(() => expect(calls.some((c) => c.method === 'POST' && c.path === '/api/v1/jobs/job-1:cancel')).toBe(true));
  });

  it('lists a cluster of the job gone offline and back on the timeline, in the reader\'s language', async () => {
    const said = (key: string, params: Record<string, string>) => ({ said: { message_key: key, params } });
    const timeline = [
      ...RUNNING.timeline,
      { seq: 9, kind: 'cluster', from_status: 'Running', to_status: 'Running', reason: 'cluster gpu-b went offline; …', at: '2026-11-29T10:02:00Z', details: { online: false, ...said('job.cluster_offline.held', { cluster: 'gpu-b', grace_s: '60' }) } },
      { seq: 12, kind: 'cluster', from_status: 'Running', to_status: 'Running', reason: 'cluster gpu-b is back online; …', at: '2026-11-29T10:02:30Z', details: { online: true, ...said('job.cluster_offline.back', { cluster: 'gpu-b' }) } },
    ];
    mockApi({ 'GET /api/v1/jobs/job-1': { ...RUNNING, timeline } });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    await screen.findByTestId('workers-table');
    const shown = screen.getByTestId('job-timeline');
    expect(shown).toHaveTextContent('集群 gpu-b 离线；若 60 秒内未恢复，作业的工作节点将视为丢失');
    expect(shown).toHaveTextContent('集群 gpu-b 已恢复在线；作业继续运行');
  });

  it('lists outputs live from the agents with download links for files and whole outputs', async () => {
    const withOutputs = { ...RUNNING, spec: { ...RUNNING.spec, spec: { header: 'actor', tasks: [], outputs: ['/data/outputs'] } } };
    mockApi({
      'GET /api/v1/jobs/job-1': withOutputs,
      'GET /api/v1/jobs/job-1/outputs': {
        job_id: 'job-1',
        files: [{ worker: 'w-0', path: '/data/outputs/ckpt-200.pt', size: 4096, mtime: 1764583200 }],
        workers: [
          { worker: 'w-0', source: 'agent', truncated: false, reason: null },
          { worker: 'w-1', source: 'unavailable', truncated: false, reason: 'the agent of cluster gpu-b is offline' },
        ],
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    await screen.findByTestId('workers-table');
    fireEvent.click(screen.getByRole('tab', { name: /输出/ }));
    const outputs = await screen.findByTestId('outputs-table');
    await waitFor(() => expect(outputs).toHaveTextContent('/data/outputs/ckpt-200.pt'));
    expect(outputs).toHaveTextContent('4.0 KiB');
    const link = screen.getByTestId('download-/data/outputs/ckpt-200.pt');
    expect(link.getAttribute('href')).toBe('/api/v1/jobs/job-1/outputs/download?worker=w-0&path=%2Fdata%2Foutputs%2Fckpt-200.pt');
    const dirs = screen.getByTestId('download-dirs');
    expect(dirs).toHaveTextContent('rollout-0');
    expect(within(dirs).getAllByRole('link')[1].getAttribute('href')).toBe('/api/v1/jobs/job-1/outputs/download?worker=w-1&path=%2Fdata%2Foutputs');
    expect(screen.getByText('the agent of cluster gpu-b is offline')).toBeTruthy();
    // The job declares a TensorBoard dir and runs: both of its tools open through the gateway (tools origin).
    expect(screen.getByTestId('tensorboard-link').getAttribute('href')).toBe('/api/v1/jobs/job-1/tools/tensorboard/');
    expect(screen.getByTestId('ray-dashboard-link').getAttribute('href')).toBe('/api/v1/jobs/job-1/tools/ray-dashboard/');
  });

  it('explains a pending job role by role, with conflicts and where it would fit', async () => {
    mockApi({
      'GET /api/v1/jobs/job-2': {
        ...RUNNING,
        id: 'job-2',
        status: 'Pending',
        workers: [],
        ray_nodes: null,
        ssh_command: null,
        pending: {
          code: 'too_few_nodes_with_enough_gpus',
          message: 'role "rollout" needs 4 nodes',
          roles: [
            { role: 'rollout', cluster: 'gpu-b', selector: { 'rlark.io/gpu-model': 'H100' }, needed: 4, gpus_per_worker: 8, cluster_known: true, cluster_online: true, in_cluster: 12, matching: 12, ready: 12, schedulable: 12, enough: 2, code: 'too_few_nodes_with_enough_gpus', message: '12 match, 2 with enough free GPUs', alternatives: [{ cluster: 'gpu-a', nodes: 6 }] },
          ],
          conflicts: [{ cluster: 'gpu-b', roles: ['rollout', 'env'], needed: 5, nodes: 4, message: 'rollout and env compete for 4 nodes of gpu-b' }],
        },
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-2', path: '/jobs/:id' });
    const pending = await screen.findByTestId('pending-explanation');
    expect(pending).toHaveTextContent('rlark.io/gpu-model=H100');
    expect(pending).toHaveTextContent('12 match, 2 with enough free GPUs');
    expect(pending).toHaveTextContent('当前可放入 gpu-a（6 个节点）');
    expect(screen.getByTestId('pending-conflict')).toHaveTextContent('rollout and env compete for 4 nodes of gpu-b');
    // No workers yet: no tool to open.
    expect(screen.queryByTestId('ray-dashboard-link')).toBeNull();
    expect(screen.queryByTestId('tensorboard-link')).toBeNull();
  });
});

describe('ssh command', () => {
  it('goes through the platform by role and index, only while the job holds workers', () => {
    const worker = { worker_id: 'w', role: 'rollout', index: 2, cluster: 'c', gpus: 0, phase: 'running', address: '192.168.1.5', virtual_ip: null };
    expect(sshCommandOf('job-9', worker, 'Running')).toBe('rlark ssh job-9/rollout-2');
    expect(sshCommandOf('job-9', worker, 'Scheduled')).toBe('rlark ssh job-9/rollout-2');
    expect(sshCommandOf('job-9', worker, 'Succeeded')).toBeNull();
    expect(sshCommandOf('job-9', worker, 'Pending')).toBeNull();
    expect(sshConfigCommandOf('job-9')).toBe('rlark ssh-config job-9 >> ~/.ssh/config');
  });
});
