import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Queue from '../pages/Queue';
import { mockApi, renderPage } from './helpers';

const OTHER = {
  position: 1, mine: false, job_id: null, name: null, owner: null, project: null, priority: 0, gpus: 16,
  clusters: ['gpu-a'], waiting_since: '2026-12-02T10:00:00Z', waits_for: 'capacity', ahead: 0, reason: null,
};
const MINE = {
  ...OTHER, position: 2, mine: true, job_id: 'j-mine', name: 'grpo', owner: 'alice', project: 'vision', gpus: 8, ahead: 1,
  waits_for: 'quota', reason: 'project "vision" would hold …',
};

describe('queue page', () => {
  it('lists waiting jobs with others unnamed and explains yours in the console language', async () => {
    mockApi({
      'GET /api/v1/queue': { items: [OTHER, MINE], total: 2 },
      'GET /api/v1/queue/j-mine': {
        job: MINE,
        jobs_ahead: [OTHER],
        estimated_start: null,
        estimate_basis: "it waits for its project's quota, not for capacity",
        estimate_basis_said: { message_key: 'queue.basis.quota', params: {} },
        hints: [{ kind: 'gpus', message: 'would fit now with 4 GPU(s) per worker', message_key: 'queue.hint.gpus', params: { gpus: 4 } }],
      },
    });
    renderPage(<Queue />, { user: { username: 'alice', role: 'user' } });
    const table = await screen.findByTestId('queue-table');
    await waitFor(() => expect(table).toHaveTextContent('grpo'));
    expect(table).toHaveTextContent('（其他用户的作业）');
    expect(table).toHaveTextContent('项目配额');
    expect(screen.getByText('2 个等待中')).toBeInTheDocument();
    const expanders = table.querySelectorAll('button.ant-table-row-expand-icon:not(.ant-table-row-expand-icon-spaced)');
    expect(expanders).toHaveLength(1); // only your job can be explained
    fireEvent.click(expanders[0] as HTMLElement);
    const explained = await screen.findByTestId('queue-explanation-j-mine');
    expect(explained).toHaveTextContent('未知');
    expect(explained).toHaveTextContent('它在等待其项目的配额，而不是等待资源');
    expect(await screen.findByTestId('queue-hints')).toHaveTextContent('如果每个 worker 使用 4 块 GPU，现在即可放入');
  });
});
