import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import JobDetail from '../pages/jobs/JobDetail';
import { RUNNING } from './fixtures/job';
import { mockApi, renderPage } from './helpers';

/** The job page's Usage tab (issue 19 item 1, ADR 0017): each worker's CPU, memory and GPU use over time. */

const point = (minute: number, cpu: number, gpu: number | null) => ({
  at: `2026-11-29T10:${String(minute).padStart(2, '0')}:00Z`,
  cpu_cores_used: cpu,
  memory_bytes: (2 + minute) * 1024 ** 3,
  gpu_count: gpu === null ? 0 : 8,
  gpu_util_pct: gpu,
  gpu_memory_used_bytes: gpu === null ? 0 : 40 * 1024 ** 3,
  gpu_memory_total_bytes: gpu === null ? 0 : 80 * 1024 ** 3,
});

const USAGE = {
  job_id: 'job-1',
  since: '2026-11-29T09:10:00Z',
  step_s: 60,
  workers: [
    { worker_id: 'w-0', role: 'actor', index: 0, attempt: 1, points: [point(1, 3.5, 80), point(2, 4.25, 91.6)] },
    { worker_id: 'w-1-a2', role: 'rollout', index: 0, attempt: 2, points: [point(1, 0.5, null), point(2, 0.75, null)] },
  ],
};

describe('job usage tab', () => {
  it('charts each worker and shows its latest CPU, memory and GPU use, per range', async () => {
    const { calls } = mockApi({ 'GET /api/v1/jobs/job-1': RUNNING, 'GET /api/v1/jobs/job-1/usage': USAGE });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    fireEvent.click(await screen.findByRole('tab', { name: /资源使用/ }));
    const table = await screen.findByTestId('usage-table');
    expect(table).toHaveTextContent('actor-0');
    expect(table).toHaveTextContent('4.25');
    expect(table).toHaveTextContent('4.0 GiB');
    expect(table).toHaveTextContent('8 个 GPU，利用率 92%');
    expect(table).toHaveTextContent('40.0 GiB / 80.0 GiB');
    expect(table).toHaveTextContent('rollout-0 · 第 2 次尝试');
    expect(table).toHaveTextContent('无 GPU');
    // Two points make a line; the GPU line is on a 0-100 scale.
    const line = screen.getByTestId('usage-gpu-w-0').querySelector('polyline');
    expect(line?.getAttribute('points')?.split(' ')).toHaveLength(2);
    expect(screen.queryByTestId('usage-gpu-w-1-a2')).toBeNull();
    const first = calls.find((c) => c.path === '/api/v1/jobs/job-1/usage');
    expect([first?.query.get('since'), first?.query.get('step')]).toEqual(['3600', '60']);

    fireEvent.click(screen.getByText('最近 24 小时'));
    await waitFor(() =>
      expect(calls.some((c) => c.path === '/api/v1/jobs/job-1/usage' && c.query.get('since') === '86400' && c.query.get('step') === '900')).toBe(true),
    );
  });

  it('says when no samples have come yet', async () => {
    mockApi({ 'GET /api/v1/jobs/job-1': RUNNING, 'GET /api/v1/jobs/job-1/usage': { ...USAGE, workers: [] } });
    renderPage(<JobDetail />, { route: '/jobs/job-1', path: '/jobs/:id' });
    fireEvent.click(await screen.findByRole('tab', { name: /资源使用/ }));
    expect(await screen.findByTestId('usage-empty')).toHaveTextContent('暂无采样');
  });
});
