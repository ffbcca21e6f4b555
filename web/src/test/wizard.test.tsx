import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import JobWizard from '../pages/jobs/JobWizard';
import { stringify as toYaml } from 'yaml';
import { initialState, newRole, roleStepProblems, stateFromTemplate, stepForField, toDocument, workerStepProblems, type WizardState } from '../pages/jobs/wizard/model';
import { mockApi, renderPage } from './helpers';

const PAGE = { total: 0, page: 1, page_size: 50 };

function fakeGateway(extra: Record<string, unknown> = {}) {
  return mockApi({
    'GET /api/v1/templates': { items: [] },
    'GET /api/v1/clusters': { ...PAGE, items: [{ name: 'gpu-a', online: true, summary: { nodes_total: 4, nodes_online: 4, gpus_total: 32, gpus_free: 16, running_jobs: 1 } }] },
    'GET /api/v1/domains': { ...PAGE, items: [{ name: 'dom-b', cidr: '10.101.0.0/16' }, { name: 'dom-a', cidr: '10.100.0.0/16' }] },
    'GET /api/v1/keys': { ...PAGE, items: [] },
    ...extra,
  });
}

function headerRadios(): HTMLInputElement[] {
  const table = screen.getByTestId('roles-table');
  return within(table).getAllByRole('radio') as HTMLInputElement[];
}

describe('create-job wizard, roles step', () => {
  it('keeps exactly one Header and refuses a Header with more than one node', async () => {
    fakeGateway();
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'grpo math' } });
    fireEvent.click(screen.getByTestId('add-role'));
    fireEvent.change(screen.getByTestId('role-name-1'), { target: { value: 'rollout' } });

    let radios = headerRadios();
    expect(radios.map((r) => r.checked)).toEqual([true, false]);
    fireEvent.click(radios[1]);
    radios = headerRadios();
    expect(radios.map((r) => r.checked)).toEqual([false, true]);

    // The Header (rollout) asks for 2 nodes: the step refuses to move on and says why.
    fireEvent.change(screen.getByTestId('role-replicas-1'), { target: { value: '2' } });
    fireEvent.blur(screen.getByTestId('role-replicas-1'));
    fireEvent.click(screen.getByTestId('wizard-next'));
    expect(await screen.findByText('Header 角色 rollout 必须恰好 1 个节点')).toBeInTheDocument();
    expect(screen.getByTestId('wizard-step-0')).toBeInTheDocument();

    // Making the single-node role the Header fixes it.
    fireEvent.click(headerRadios()[0]);
    fireEvent.click(screen.getByTestId('wizard-next'));
    expect(await screen.findByTestId('wizard-step-1')).toBeInTheDocument();
  });

  it('maps a server error on a role field back to its step and input', async () => {
    fakeGateway({
      'POST /api/v1/jobs:preview': {
        yaml: 'apiVersion: rlark.io/v1\n',
        errors: [{ code: 'image_tag_latest', message: 'image uses the latest tag', field: 'spec.tasks[0].image', line: 12 }],
        warnings: [],
      },
    });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'job' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    // A cluster is required before moving on; choose it through the select.
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/gpu-a ·/));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    await waitFor(() => expect(screen.getByTestId('common-domain')).toHaveTextContent('dom-a'));
    fireEvent.click(screen.getByTestId('wizard-next'));

    const errors = await screen.findByTestId('preview-errors');
    expect(errors).toHaveTextContent('spec.tasks[0].image');
    expect(errors).toHaveTextContent('image uses the latest tag');
    expect(screen.getByTestId('wizard-submit')).toBeDisabled();
    fireEvent.click(within(errors).getByText('spec.tasks[0].image'));
    await screen.findByTestId('wizard-step-1');
    const item = screen.getByTestId('role-image-0').closest('.ant-form-item') as HTMLElement;
    expect(item).toHaveClass('ant-form-item-has-error');
    expect(item).toHaveTextContent('image uses the latest tag');
  });
});

describe('create-job wizard, common step', () => {
  it('lets a single-cluster job choose networkDomain none', async () => {
    const { calls } = fakeGateway({ 'POST /api/v1/jobs:preview': { yaml: 'apiVersion: rlark.io/v1\n', errors: [], warnings: [] } });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'solo' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/gpu-a ·/));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    await waitFor(() => expect(screen.getByTestId('common-domain')).toHaveTextContent('dom-a'));
    fireEvent.mouseDown(within(screen.getByTestId('common-domain')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/^none[:：]/));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: { networkDomain?: string } };
    expect(body.spec.networkDomain).toBe('none');
  });
});

describe('create-job wizard, a variable from a secret', () => {
  it('chooses one of the user\'s secrets and sends NAME: {secret: name}, never a value', async () => {
    const { calls } = fakeGateway({
      'GET /api/v1/secrets': { ...PAGE, items: [{ name: 'hf-token', scope: 'user', owner: 'alice', version: 2 }, { name: 's3-datasets', scope: 'user', owner: 'alice', version: 1 }] },
      'POST /api/v1/jobs:preview': { yaml: 'apiVersion: rlark.io/v1\n', errors: [], warnings: [] },
    });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'grpo' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/gpu-a ·/));

    fireEvent.click(screen.getByTestId('add-env-0'));
    fireEvent.change(screen.getByLabelText('变量名'), { target: { value: 'HF_TOKEN' } });
    fireEvent.change(screen.getByPlaceholderText('INFO'), { target: { value: 'typed-before-switching' } });
    fireEvent.click(within(screen.getByTestId('env-source-0-0')).getByText('来自密钥'));
    // An empty secret is refused one step early, naming the variable.
    fireEvent.click(screen.getByTestId('wizard-next'));
    expect(await screen.findByText('变量 HF_TOKEN：请选择它的值来自哪个密钥')).toBeInTheDocument();

    const secret = within(screen.getByTestId('env-secret-0-0')).getByRole('combobox');
    fireEvent.change(secret, { target: { value: 'hf' } });
    expect(screen.queryByTestId('secret-option-s3-datasets')).not.toBeInTheDocument();
    fireEvent.click(await screen.findByTestId('secret-option-hf-token'));
    await waitFor(() => expect(secret).toHaveValue('hf-token'));
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    fireEvent.click(screen.getByTestId('wizard-next'));

    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: { tasks: Array<{ env?: unknown }> } };
    expect(body.spec.tasks[0].env).toEqual({ HF_TOKEN: { secret: 'hf-token' } });
    expect(JSON.stringify(body)).not.toContain('typed-before-switching');
  });
});

describe('create-job wizard, any cluster (ADR 0026)', () => {
  const LAYOUT = {
    kind: 'one',
    clusters: ['gpu-a'],
    domain: null,
    roles: [{ role: 'worker', clusters: ['gpu-a'] }],
    rtt_ms: null,
    split: [],
    apart: [],
    message: 'fits on gpu-a alone',
    parts: [{ message_key: 'layout.one', params: { cluster: 'gpu-a' } }],
  };

  async function throughToPreview(untickSpan = false) {
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'anywhere' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    // No cluster chosen: "any cluster" is the default, and the step moves on without one.
    expect(within(screen.getByTestId('role-cluster-0')).getByText('任意集群（由调度器选择）')).toBeInTheDocument();
    fireEvent.change(screen.getByTestId('role-image-0'), { target: { value: 'registry.example.com/rlinf:v1' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-2');
    await waitFor(() => expect(screen.getByTestId('common-domain')).toHaveTextContent('任意：'));
    const span = screen.getByTestId('common-span') as HTMLInputElement;
    expect(span.checked).toBe(true);
    if (untickSpan) fireEvent.click(span);
    fireEvent.click(screen.getByTestId('wizard-next'));
  }

  it('leaves the cluster and the domain to the scheduler and shows where it would place the job now', async () => {
    const { calls } = fakeGateway({
      'POST /api/v1/jobs:preview': { yaml: 'apiVersion: rlark.io/v1\n', errors: [], warnings: [], layout: LAYOUT, pending: null, plan: [] },
    });
    await throughToPreview();
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: { networkDomain?: string; placement?: unknown; tasks: Array<Record<string, unknown>> } };
    expect(body.spec.tasks[0]).not.toHaveProperty('cluster');
    expect(body.spec.networkDomain).toBeUndefined();
    expect(body.spec.placement).toBeUndefined();
    expect(await screen.findByTestId('preview-layout-said')).toHaveTextContent('仅在 gpu-a 上即可放下');
    expect(screen.getByTestId('preview-layout')).toHaveTextContent('worker → gpu-a');
  });

  it('with spanning unticked writes spanClusters: never and says why the job would wait', async () => {
    const pending = {
      code: 'no_cluster_fits',
      message: 'no cluster fits the whole job now; closest: gpu-a (1 of 2 workers); spanning ...',
      parts: [
        { message_key: 'pending.no_cluster_fits', params: { cluster: 'gpu-a', placed: 1, workers: 2 } },
        { message_key: 'pending.span_refused', params: { clusters: 'gpu-a, gpu-b', domain: 'dom-a' } },
      ],
      roles: [],
    };
    const { calls } = fakeGateway({
      'POST /api/v1/jobs:preview': { yaml: 'apiVersion: rlark.io/v1\n', errors: [], warnings: [], layout: null, pending, plan: [] },
    });
    await throughToPreview(true);
    await waitFor(() => expect(calls.some((c) => c.method === 'POST')).toBe(true));
    const body = calls.find((c) => c.method === 'POST')?.body as { spec: { placement?: unknown } };
    expect(body.spec.placement).toEqual({ spanClusters: 'never' });
    const waits = await screen.findByTestId('preview-layout-waits');
    expect(waits).toHaveTextContent('现在没有一个集群能容纳整个作业；最接近的是 gpu-a（2 个工作节点中可放下 1 个）');
    expect(waits).toHaveTextContent('若经由网络域 dom-a 跨集群 gpu-a, gpu-b，现在即可放置（spec.placement.spanClusters 为 never）');
  });
});

describe('wizard model', () => {
  function twoRoles(): WizardState {
    const state = initialState();
    const actor = { ...state.roles[0], name: 'actor', cluster: 'gpu-a', image: 'r/rlinf:v1', selector: ['rlark.io/gpu-model=A100'] };
    const rollout = { ...newRole('rollout', 3, 4), cluster: 'gpu-b', image: 'r/rlinf:v1' };
    return { ...state, name: ' grpo ', roles: [actor, rollout], headerId: actor.id, networkDomain: 'dom-a', sshKeys: ['laptop'] };
  }

  it('writes no cluster for a role on any cluster, and needs none to move on (ADR 0026)', () => {
    const state = initialState();
    const anywhere = { ...state, name: 'anywhere', roles: [{ ...state.roles[0], image: 'r/rlinf:v1' }] };
    expect(anywhere.roles[0].cluster).toBe('');
    expect(toDocument(anywhere).spec.tasks[0]).not.toHaveProperty('cluster');
    expect(workerStepProblems(anywhere)).toEqual([]);
    expect(toDocument({ ...anywhere, spanClusters: false }).spec.placement).toEqual({ spanClusters: 'never' });
    const pinned = { ...anywhere, spanClusters: false, roles: [{ ...anywhere.roles[0], cluster: 'gpu-a' }] };
    expect(toDocument(pinned).spec.placement).toBeUndefined();
  });

  it('writes networkDomain: none when a single-cluster job stays out of every domain', () => {
    const state = initialState();
    const doc = toDocument({ ...state, name: 'solo', roles: [{ ...state.roles[0], cluster: 'gpu-a', image: 'r/rlinf:v1' }], networkDomain: 'none' });
    expect(doc.spec.networkDomain).toBe('none');
  });

  it('writes one spec.tasks entry per role with the Header by name', () => {
    const doc = toDocument(twoRoles());
    expect(doc.apiVersion).toBe('rlark.io/v1');
    expect(doc.kind).toBe('Job');
    expect(doc.metadata.name).toBe('grpo');
    expect(doc.spec.header).toBe('actor');
    expect(doc.spec.networkDomain).toBe('dom-a');
    expect(doc.spec.tasks).toHaveLength(2);
    expect(doc.spec.tasks[0]).toEqual({
      name: 'actor',
      cluster: 'gpu-a',
      nodeSelector: { 'rlark.io/gpu-model': 'A100' },
      replicas: 1,
      gpusPerWorker: 8,
      image: 'r/rlinf:v1',
    });
    expect(doc.spec.tasks[1].replicas).toBe(3);
  });

  it('refuses duplicate role names and a missing Header', () => {
    const state = twoRoles();
    state.roles[1].name = 'actor';
    state.headerId = 'nobody';
    const keys = roleStepProblems(state).map((p) => p.key);
    expect(keys).toContain('wizard.err.roleNameDuplicate');
    expect(keys).toContain('wizard.err.headerRequired');
  });

  it('starts from a template example given as YAML, leaving the example cluster and image to the user', () => {
    const example_yaml = [
      'apiVersion: rlark.io/v1',
      'kind: Job',
      'metadata: {name: actor + rollout}',
      'spec:',
      '  type: template',
      '  template: rl-actor-rollout',
      '  header: actor',
      '  runScript: |',
      '    python train.py',
      '  rlinfConfig: {cluster: {num_nodes: 3}}',
      '  tasks:',
      '    - {name: actor, cluster: my-cluster, replicas: 1, gpusPerWorker: 8, image: "r/rlinf:v0.3.0"}',
      '    - {name: rollout, cluster: my-cluster, replicas: 2, gpusPerWorker: 8, image: "r/rlinf:v0.3.0"}',
    ].join('\n');
    const state = stateFromTemplate(
      { id: 'rl-actor-rollout', title_en: 'RL', title_zh: 'RL', example_yaml },
      initialState(),
    );
    expect(state.roles.map((r) => [r.name, r.replicas, r.gpusPerWorker, r.cluster, r.image])).toEqual([
      ['actor', 1, 8, '', ''],
      ['rollout', 2, 8, '', ''],
    ]);
    expect(state.roles.find((r) => r.id === state.headerId)?.name).toBe('actor');
    expect(state.runScript).toBe('python train.py\n');
    expect(toDocument(state).spec).toMatchObject({ type: 'template', template: 'rl-actor-rollout', rlinfConfig: { cluster: { num_nodes: 3 } } });
  });

  it('writes a variable from a secret in the mapping form beside plain values', () => {
    const state = twoRoles();
    state.roles[0].env = [
      { name: 'HF_TOKEN', value: '', secret: 'hf-token' },
      { name: 'NCCL_DEBUG', value: 'INFO' },
    ];
    const doc = toDocument(state);
    expect(doc.spec.tasks[0].env).toEqual({ HF_TOKEN: { secret: 'hf-token' }, NCCL_DEBUG: 'INFO' });
    expect(toYaml(doc.spec.tasks[0].env)).toBe('HF_TOKEN:\n  secret: hf-token\nNCCL_DEBUG: INFO\n');
    expect(workerStepProblems(state)).toEqual([]);
    state.roles[0].env[0].secret = ' ';
    expect(workerStepProblems(state)).toEqual([{ field: 'spec.tasks[0].env', key: 'wizard.err.envSecret', values: { name: 'HF_TOKEN' } }]);
  });

  it('reads a template example\'s variables from a secret in either form', () => {
    const example_yaml = [
      'apiVersion: rlark.io/v1',
      'kind: Job',
      'metadata: {name: example}',
      'spec:',
      '  header: a',
      '  tasks:',
      '    - name: a',
      '      cluster: my-cluster',
      '      replicas: 1',
      '      gpusPerWorker: 0',
      '      image: "r/rlinf:v1"',
      '      env: {HF_TOKEN: {secret: hf-token}, LEVEL: info}',
      '    - name: b',
      '      cluster: my-cluster',
      '      replicas: 1',
      '      gpusPerWorker: 0',
      '      image: "r/rlinf:v1"',
      '      env: [{name: WANDB_API_KEY, secret: wandb}, {name: LEVEL, value: debug}]',
    ].join('\n');
    const state = stateFromTemplate({ id: 't', title_en: 'T', title_zh: 'T', example_yaml }, initialState());
    expect(state.roles.map((r) => r.env)).toEqual([
      [{ name: 'HF_TOKEN', value: '', secret: 'hf-token' }, { name: 'LEVEL', value: 'info' }],
      [{ name: 'WANDB_API_KEY', value: '', secret: 'wandb' }, { name: 'LEVEL', value: 'debug' }],
    ]);
  });

  it('sends each server field to the step that edits it', () => {
    expect(stepForField('metadata.name')).toBe(0);
    expect(stepForField('spec.tasks[1].replicas')).toBe(0);
    expect(stepForField('spec.tasks[1].nodeSelector["rlark.io/gpu-model"]')).toBe(1);
    expect(stepForField('spec.runScript')).toBe(2);
    expect(stepForField('')).toBe(3);
  });
});
