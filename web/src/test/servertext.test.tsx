import { act, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import type { SpecProblem } from '../api/types';
import i18n from '../i18n';
import en from '../i18n/server/en.json';
import zhCN from '../i18n/server/zh-CN.json';
import { fillTemplate, serverClauses, serverText } from '../i18n/server';
import JobDetail from '../pages/jobs/JobDetail';
import Jobs from '../pages/jobs/Jobs';
import PreviewStep from '../pages/jobs/wizard/PreviewStep';
import { mockApi, renderPage } from './helpers';

const placeholders = (template: string) => [...template.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
/** Latin words of three letters or more outside names, fields and values: English leaking through. */
const ENGLISH = /\b(needs|match|ready|schedulable|submitted|cluster is|is not|must|nodes)\b/;

afterEach(async () => {
  await i18n.changeLanguage('zh-CN');
});

describe('server sentences (ADR 0011)', () => {
  it('has every server key in both languages with the same placeholders', () => {
    expect(Object.keys(zhCN).sort()).toEqual(Object.keys(en).sort());
    const wrong = Object.entries(en).filter(([key, template]) => placeholders(template).join() !== placeholders((zhCN as Record<string, string>)[key]).join());
    expect(wrong).toEqual([]);
  });

  it('renders the key with its params in Chinese, the server message in English, and falls back to the message', () => {
    const said = { code: 'domain_exists', message_key: 'domain_exists', params: { name: "'train'" }, message: "a network domain named 'train' already exists" };
    expect(serverText('zh-CN', said)).toBe("已存在名为 'train' 的网络域");
    expect(serverText('en', said)).toBe("a network domain named 'train' already exists");
    expect(serverText('zh-CN', { message_key: 'not_in_the_catalogue', message: 'as the server said' })).toBe('as the server said');
    expect(serverText('zh-CN', { message_key: 'domain_exists', params: {}, message: 'kept when a value is missing' })).toBe('kept when a value is missing');
    expect(fillTemplate('{a} of {b}', { a: 1, b: 'x' })).toBe('1 of x');
    expect(serverClauses('zh-CN', [{ message_key: 'job.submitted' }, { message_key: 'job.keys_updated' }], 'x')).toBe('已提交；SSH 密钥已更新');
  });

  it('says a pending job, its reason and its timeline in Chinese with the counts the scheduler sent', async () => {
    const main = { message_key: 'pending.needs', params: { role: 'rollout', needed: 4, gpus: 8, selector: 'rlark.io/gpu-model=H100', cluster: 'gpu-b', matching: 12, ready: 12, schedulable: 12, enough: 2 } };
    const use = { message_key: 'pending.gpus_in_use.held', params: { schedulable: 12, used: 90, allocatable: 96, external: 0, held: 90 } };
    const english = 'role "rollout" needs 4 nodes with ≥ 8 free GPUs matching rlark.io/gpu-model=H100 in cluster gpu-b: 12 match, 12 ready, 12 schedulable, 2 with enough free GPUs; GPUs in use on those 12 schedulable nodes: 90 of 96 (90 by RLark jobs)';
    mockApi({
      'GET /api/v1/jobs/job-3': {
        id: 'job-3', name: 'grpo', owner: 'alice', status: 'Pending', reason: english, workers: [], outputs: [], warnings: [], details: {},
        created_at: '2026-11-29T10:00:00Z', ray_nodes: null, ssh_command: null,
        pending: {
          code: 'too_few_nodes_with_enough_gpus', message: english, parts: [main, use],
          roles: [{ role: 'rollout', cluster: 'gpu-b', selector: { 'rlark.io/gpu-model': 'H100' }, needed: 4, gpus_per_worker: 8, in_cluster: 12, matching: 12, ready: 12, schedulable: 12, enough: 2, code: 'too_few_nodes_with_enough_gpus', message: english, parts: [main, use], alternatives: [] }],
          conflicts: [],
        },
        timeline: [
          { seq: 1, kind: 'status', from_status: '', to_status: 'Pending', reason: 'submitted', details: { said: { message_key: 'job.submitted', params: {} } }, at: '2026-11-29T10:00:00Z' },
          { seq: 2, kind: 'pending', from_status: '', to_status: 'Pending', reason: english, details: { code: 'too_few_nodes_with_enough_gpus', parts: [main, use] }, at: '2026-11-29T10:00:01Z' },
        ],
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-3', path: '/jobs/:id' });
    const pending = await screen.findByTestId('pending-explanation');
    const chinese = '角色 "rollout" 需要集群 gpu-b 中 4 个匹配 rlark.io/gpu-model=H100 且有 ≥ 8 个空闲 GPU 的节点：12 个匹配，12 个就绪，12 个可调度，2 个有足够的空闲 GPU；这 12 个可调度节点上已用 GPU：90/96（90 个被 RLark 作业占用）';
    expect(pending).toHaveTextContent(chinese);
    expect(screen.getByTestId('job-reason')).toHaveTextContent(chinese);
    const timeline = screen.getByTestId('job-timeline');
    expect(timeline).toHaveTextContent('已提交');
    expect(timeline).toHaveTextContent(chinese);
    for (const part of [pending, timeline, screen.getByTestId('job-reason')]) expect(part.textContent).not.toMatch(ENGLISH);

    await act(async () => {
      await i18n.changeLanguage('en');
    });
    expect(await screen.findByTestId('job-reason')).toHaveTextContent(english);
  });

  it('says a failed worker\'s reason in Chinese from the key the agent sent', async () => {
    mockApi({
      'GET /api/v1/jobs/job-6': {
        id: 'job-6', name: 'sft', owner: 'alice', status: 'Failed', reason: 'prepare script exited with 3', outputs: [], warnings: [], details: {},
        reason_said: { message_key: 'worker.prepare_failed', params: { code: 3 } },
        created_at: '2026-11-29T10:00:00Z', ray_nodes: null, ssh_command: null, pending: null, timeline: [],
        workers: [{ id: 'w-0', role: 'trainer', index: 0, rank: 0, is_header: true, cluster: 'gpu-a', node: 'n1', address: '10.0.0.2', gpus: 0, phase: 'Failed', ray_joined: false, exit_code: 3, reason: 'prepare script exited with 3', reason_said: { message_key: 'worker.prepare_failed', params: { code: 3 } } }],
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-6', path: '/jobs/:id' });
    expect(await screen.findByTestId('job-reason')).toHaveTextContent('准备脚本退出，退出码 3');
    expect(screen.getByTestId('workers-table')).toHaveTextContent('准备脚本退出，退出码 3');
    expect(screen.queryByText(/prepare script exited/)).toBeNull();
  });

  it('says in Chinese that the platform stopped the other workers when the Header\'s run script ended', async () => {
    const stopped = "stopped by the platform: the Header's run script ended";
    const worker = { role: 'rollout', rank: 1, is_header: false, cluster: 'gpu-a', address: '10.0.0.3', gpus: 0, phase: 'Stopped', ray_joined: true, exit_code: 143 };
    mockApi({
      'GET /api/v1/jobs/job-7': {
        id: 'job-7', name: 'grpo', owner: 'alice', status: 'Succeeded', reason: 'run script exited with 0', outputs: [], warnings: [], details: {},
        reason_said: { message_key: 'job.succeeded', params: { code: 0 } },
        created_at: '2026-11-29T10:00:00Z', ray_nodes: null, ssh_command: null, pending: null, timeline: [],
        workers: [
          { ...worker, id: 'w-1', index: 0, node: 'n2', reason: stopped, reason_said: { message_key: 'worker.stopped.run_ended', params: {} } },
          { ...worker, id: 'w-2', index: 1, node: 'n3', reason: stopped, reason_said: { message_key: 'worker.stopped.run_ended', params: {} } },
        ],
      },
    });
    renderPage(<JobDetail />, { route: '/jobs/job-7', path: '/jobs/:id' });
    const table = await screen.findByTestId('workers-table');
    expect(table).toHaveTextContent('已由平台停止：Header 的运行脚本已结束');
    expect(screen.queryByText(/stopped by the platform|stopped on request/)).toBeNull();
  });

  it('lists jobs with their reasons in Chinese', async () => {
    const job = { id: 'job-4', name: 'sft', owner: 'alice', status: 'Succeeded', clusters: ['gpu-a'], created_at: '2026-11-29T10:00:00Z' };
    mockApi({
      'GET /api/v1/jobs': {
        total: 2, page: 1, page_size: 50,
        items: [
          { ...job, reason: 'run script exited with 0', reason_said: { message_key: 'job.succeeded', params: { code: 0 } } },
          { ...job, id: 'job-5', status: 'Failed', reason: 'an agent said so', reason_said: null },
        ],
      },
    });
    renderPage(<Jobs />, { route: '/jobs' });
    expect(await screen.findByText('运行脚本退出，退出码 0')).toBeInTheDocument();
    expect(screen.queryByText('run script exited with 0')).toBeNull();
    expect(screen.getByText('an agent said so')).toBeInTheDocument(); // not keyed: as the server wrote it
  });

  it('shows the wizard preview problems in Chinese, field by field', async () => {
    const problems: SpecProblem[] = [
      { code: 'cluster_unknown', message: 'spec.tasks[0].cluster: no cluster is named "gpu-z"', message_key: 'cluster_unknown', params: { field: 'spec.tasks[0].cluster', cluster: 'gpu-z' }, field: 'spec.tasks[0].cluster', severity: 'error' as const },
      { code: 'image_latest_refused', message: 'spec.tasks[0].image: "latest" names no version; use an explicit tag or a digest', message_key: 'image_latest_refused', params: { field: 'spec.tasks[0].image' }, field: 'spec.tasks[0].image', severity: 'error' as const },
    ];
    const doc = { apiVersion: 'rlark.io/v1', kind: 'Job', metadata: { name: 'x' }, spec: { header: 'a', tasks: [] } } as never;
    renderPage(<PreviewStep doc={doc} preview={{ yaml: '', errors: problems, warnings: [] }} loading={false} error={null} onJump={() => undefined} />);
    expect(await screen.findByText('spec.tasks[0].cluster：没有名为 "gpu-z" 的集群')).toBeInTheDocument();
    expect(screen.getByText('spec.tasks[0].image："latest" 不代表任何确定版本；请使用明确的标签或摘要')).toBeInTheDocument();
    expect(screen.queryByText(/no cluster is named/)).toBeNull();
  });
});
