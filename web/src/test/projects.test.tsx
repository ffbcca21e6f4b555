import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Projects, { parsePairs } from '../pages/Projects';
import { apiError, mockApi, renderPage } from './helpers';

const VISION = {
  name: 'vision',
  description: 'vision RL',
  members: ['alice', 'bob'],
  quota: { gpus: 16, clusters: { 'gpu-a': 8 }, models: {}, borrowing_limit: 8, max_priority: 10 },
  usage: { gpus: 24, clusters: { 'gpu-a': 8, 'gpu-b': 16 }, models: { A100: 24 }, running_jobs: 3, waiting_jobs: 1 },
  created_at: '2026-12-02T10:00:00Z',
  updated_at: '2026-12-02T10:00:00Z',
  updated_by: 'root',
};

describe('projects page', () => {
  it('shows each project with its quota, what it holds now and whether it borrows', async () => {
    mockApi({ 'GET /api/v1/projects': { items: [VISION] } });
    renderPage(<Projects />, { user: { username: 'alice', role: 'user' } });
    const table = await screen.findByTestId('projects-table');
    await waitFor(() => expect(table).toHaveTextContent('vision'));
    expect(table).toHaveTextContent('16 块 GPU');
    expect(table).toHaveTextContent('gpu-a: 8');
    expect(table).toHaveTextContent('+ 最多借用 8 块');
    expect(table).toHaveTextContent('优先级 ≤ 10');
    expect(screen.getByTestId('project-usage-vision')).toHaveTextContent('24 / 16 块 GPU');
    expect(screen.getByTestId('project-usage-vision')).toHaveTextContent('借用中 8 块 GPU');
    expect(table).toHaveTextContent('3 运行中 · 1 等待中');
    expect(screen.queryByTestId('project-form')).not.toBeInTheDocument();
  });

  it('lets an admin create a project and marks the field the server refuses', async () => {
    const { calls } = mockApi({
      'GET /api/v1/projects': { items: [] },
      'POST /api/v1/projects': apiError(422, 'invalid_quota', 'clusters["gpu-a"]: 32 is more than the overall quota (16)', 'quota.clusters["gpu-a"]'),
    });
    renderPage(<Projects />, { user: { username: 'root', role: 'admin' } });
    fireEvent.change(screen.getByTestId('project-name'), { target: { value: 'speech' } });
    fireEvent.change(screen.getByTestId('project-gpus').querySelector('input') ?? screen.getByTestId('project-gpus'), { target: { value: '16' } });
    const clusters = screen.getByTestId('project-clusters').querySelector('input') as HTMLInputElement;
    fireEvent.change(clusters, { target: { value: 'gpu-a=32' } });
    fireEvent.keyDown(clusters, { key: 'Enter', code: 'Enter' });
    fireEvent.click(screen.getByTestId('project-submit'));
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const post = calls.find((c) => c.method === 'POST');
    expect(post?.body).toEqual({ name: 'speech', description: '', members: [], quota: { gpus: 16, borrowing_limit: 0, clusters: { 'gpu-a': 32 }, models: {}, max_priority: null } });
    expect(await screen.findByTestId('api-error')).toHaveTextContent('32 is more than the overall quota (16)');
    await waitFor(() => expect(screen.getByTestId('project-clusters').closest('.ant-form-item')).toHaveClass('ant-form-item-has-error'));
  });

  it('reads NAME=GPUS tags, refusing anything else', () => {
    expect(parsePairs(['gpu-a=8', 'nvidia/H100=4'])).toEqual({ 'gpu-a': 8, 'nvidia/H100': 4 });
    expect(parsePairs(['gpu-a'])).toBeNull();
    expect(parsePairs(['gpu-a=-1'])).toBeNull();
    expect(parsePairs([])).toEqual({});
  });
});

describe('wizard project', () => {
  it('writes spec.project only when chosen, and the step goes back to it for spec.project errors', async () => {
    const { initialState, stepForField, toDocument } = await import('../pages/jobs/wizard/model');
    const state = initialState();
    const solo = { ...state, name: 'solo', roles: [{ ...state.roles[0], cluster: 'gpu-a', image: 'r/rlinf:v1' }] };
    expect('project' in toDocument(solo).spec).toBe(false);
    expect(toDocument({ ...solo, project: 'vision' }).spec.project).toBe('vision');
    expect(stepForField('spec.project')).toBe(stepForField('spec.priority'));
  });
});
