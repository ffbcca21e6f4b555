/**
 * Step 2: per-role worker settings. A role runs on any cluster by default — the scheduler chooses, and the preview
 * says where (ADR 0026) — or on the cluster chosen here. The node selector is picked from the label catalog (the
 * chosen cluster's, or every cluster's) or typed, and for a chosen cluster a live count says how many nodes match,
 * how many are ready and how many have enough free GPUs — the user guide's "does the selector match available
 * nodes" before submitting.
 */
import { Alert, AutoComplete, Button, Checkbox, Col, Form, Input, InputNumber, Row, Segmented, Select, Space, Tabs, Tag, Typography } from 'antd';
import { DeleteOutlined, PlusOutlined } from '@ant-design/icons';
import { useQuery } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { clustersApi, nodesApi, secretsApi } from '../../../api/endpoints';
import type { MatchedNode, MountSpec } from '../../../api/types';
import { parseTerm, selectorQuery } from '../../../lib/selector';
import { useDebounced } from '../../../lib/useDebounced';
import { useWizard } from './context';
import { imageProblem, type EnvVar, type RoleDraft } from './model';

/** The cluster select's value for "any cluster": the role names none and the scheduler chooses (ADR 0026). */
const ANY_CLUSTER = '*';

function MatchLine({ role }: { role: RoleDraft }) {
  const { t } = useTranslation();
  const selector = useDebounced(selectorQuery(role.selector), 300);
  const gpus = useDebounced(role.gpusPerWorker, 300);
  const match = useQuery({
    queryKey: ['match', role.cluster, selector, gpus],
    queryFn: () => nodesApi.match(role.cluster, selector, gpus),
    enabled: Boolean(role.cluster),
    placeholderData: (prev) => prev,
  });
  if (!role.cluster) return null;
  if (match.error) return <Alert type="error" showIcon title={(match.error as Error).message} />;
  const m = match.data;
  if (!m) return <Typography.Text type="secondary">{t('wizard.matching')}</Typography.Text>;
  const enough = m.with_free_gpus >= role.replicas;
  return (
    <Alert
      data-testid="match-line"
      className="match-line"
      type={m.matching === 0 ? 'error' : enough ? 'success' : 'warning'}
      showIcon
      title={t('wizard.matchLine', { matching: m.matching, ready: m.ready, free: m.with_free_gpus, gpus: role.gpusPerWorker, total: m.total })}
      description={
        enough
          ? t('wizard.matchEnough', { count: role.replicas })
          : m.matching === 0
            ? t('wizard.matchNone')
            : t('wizard.matchShort', { count: role.replicas, free: m.with_free_gpus })
      }
    />
  );
}

/** The most GPUs one matching node has (when the answer says) and the most it has free now. */
export function gpuLimits(nodes: MatchedNode[]): { capacity: number | null; free: number | null } {
  if (!nodes.length) return { capacity: null, free: null };
  const sizes = nodes.map((n) => n.gpu_allocatable ?? n.gpu_count).filter((v): v is number => typeof v === 'number');
  return {
    capacity: sizes.length ? Math.max(...sizes) : null,
    free: Math.max(...nodes.filter((n) => n.ready && n.schedulable).map((n) => n.gpu_free ?? 0), 0),
  };
}

/** Which host directories the role's cluster lets workers mount: the server refuses any other source. */
function HostPathHint({ cluster }: { cluster: string }) {
  const { t } = useTranslation();
  const policy = useQuery({
    queryKey: ['hostpath-policy', cluster],
    queryFn: () => clustersApi.hostPathPolicy(cluster),
    enabled: Boolean(cluster),
  });
  if (!policy.data) return null;
  const allow = policy.data.allow ?? [];
  return (
    <Typography.Text type={allow.length ? 'secondary' : 'warning'} data-testid="hostpath-hint">
      {allow.length
        ? t('hostPaths.wizardAllowed', { cluster, prefixes: allow.join(', ') })
        : t('hostPaths.wizardNone', { cluster })}
    </Typography.Text>
  );
}

function MountsEditor({ role, index }: { role: RoleDraft; index: number }) {
  const { t } = useTranslation();
  const { setRole } = useWizard();
  const update = (i: number, patch: Partial<MountSpec>) =>
    setRole(role.id, { mounts: role.mounts.map((m, j) => (j === i ? { ...m, ...patch } : m)) });
  return (
    <Space orientation="vertical" style={{ width: '100%' }}>
      {role.mounts.map((m, i) => (
        <Space key={i} wrap align="start">
          <Input aria-label={t('wizard.mountName')} placeholder={t('wizard.mountName')} value={m.name} onChange={(e) => update(i, { name: e.target.value })} style={{ width: 110 }} />
          <Select
            aria-label={t('wizard.mountType')}
            value={m.type}
            onChange={(type) => update(i, { type })}
            style={{ width: 150 }}
            options={[
              { value: 'hostPath', label: t('wizard.mountHostPath') },
              { value: 'pvc', label: 'PVC' },
              { value: 'objectStorage', label: t('wizard.mountObject') },
            ]}
          />
          <Input aria-label={t('wizard.mountSource')} placeholder={m.type === 'objectStorage' ? 's3://bucket/prefix' : m.type === 'pvc' ? 'pvc-name' : '/mnt/data'} value={m.source} onChange={(e) => update(i, { source: e.target.value })} style={{ width: 200 }} />
          <Input aria-label={t('wizard.mountPath')} placeholder="/data" value={m.path} onChange={(e) => update(i, { path: e.target.value })} style={{ width: 150 }} />
          {m.type === 'objectStorage' && (
            <SecretNameInput label={t('wizard.mountSecret')} placeholder={t('wizard.mountSecret')} value={m.secretRef ?? ''} onChange={(secretRef) => update(i, { secretRef })} width={170} />
          )}
          <Checkbox checked={Boolean(m.readOnly)} onChange={(e) => update(i, { readOnly: e.target.checked })}>
            {t('wizard.readOnly')}
          </Checkbox>
          <Button type="text" danger icon={<DeleteOutlined />} aria-label={t('common.delete')} onClick={() => setRole(role.id, { mounts: role.mounts.filter((_, j) => j !== i) })} />
        </Space>
      ))}
      {role.mounts.some((m) => m.type === 'hostPath') && <HostPathHint cluster={role.cluster} />}
      <Button
        size="small"
        icon={<PlusOutlined />}
        data-testid={`add-mount-${index}`}
        onClick={() => setRole(role.id, { mounts: [...role.mounts, { name: `data${role.mounts.length || ''}`, type: 'hostPath', source: '', path: '' }] })}
      >
        {t('wizard.addMount')}
      </Button>
    </Space>
  );
}

/**
 * A secret's name: one of yours to choose, or typed (a project's secrets are named the same way, and only admins
 * can list them). Names only: the value never reaches the wizard.
 */
function SecretNameInput({ label, placeholder, value, onChange, width, testId }: { label: string; placeholder: string; value: string; onChange: (name: string) => void; width: number; testId?: string }) {
  const secrets = useQuery({ queryKey: ['secrets', ''], queryFn: () => secretsApi.list() });
  const options = (secrets.data?.items ?? [])
    .filter((s) => s.name.includes(value.trim()))
    .map((s) => ({
      value: s.name,
      label: (
        <span className="mono" data-testid={`secret-option-${s.name}`}>
          {s.name} <Typography.Text type="secondary">v{s.version}</Typography.Text>
        </span>
      ),
    }));
  return (
    <AutoComplete value={value} onChange={onChange} options={options} style={{ width }} data-testid={testId}>
      <Input aria-label={label} placeholder={placeholder} className="mono" autoComplete="off" />
    </AutoComplete>
  );
}

function EnvEditor({ role, index }: { role: RoleDraft; index: number }) {
  const { t } = useTranslation();
  const { setRole } = useWizard();
  const update = (i: number, patch: Partial<EnvVar>) =>
    setRole(role.id, { env: role.env.map((e, j) => (j === i ? { ...e, ...patch } : e)) });
  return (
    <Space orientation="vertical" style={{ width: '100%' }}>
      {role.env.map((e, i) => (
        <Space key={i} wrap>
          <Input aria-label={t('wizard.envName')} placeholder={e.secret !== undefined ? 'HF_TOKEN' : 'NCCL_DEBUG'} className="mono" value={e.name} onChange={(ev) => update(i, { name: ev.target.value })} style={{ width: 200 }} />
          <Segmented
            aria-label={t('wizard.envSource')}
            data-testid={`env-source-${index}-${i}`}
            value={e.secret !== undefined ? 'secret' : 'value'}
            // Switching to a secret drops any typed value, so it is never sent beside the reference.
            onChange={(source) => update(i, source === 'secret' ? { value: '', secret: '' } : { secret: undefined })}
            options={[
              { value: 'value', label: t('wizard.envFromValue') },
              { value: 'secret', label: t('wizard.envFromSecret') },
            ]}
          />
          {e.secret !== undefined ? (
            <SecretNameInput label={t('wizard.envSecret')} placeholder={t('wizard.chooseSecret')} value={e.secret} onChange={(secret) => update(i, { secret })} width={230} testId={`env-secret-${index}-${i}`} />
          ) : (
            <Input aria-label={t('wizard.envValue')} placeholder="INFO" className="mono" value={e.value} onChange={(ev) => update(i, { value: ev.target.value })} style={{ width: 230 }} />
          )}
          <Button type="text" danger icon={<DeleteOutlined />} aria-label={t('common.delete')} onClick={() => setRole(role.id, { env: role.env.filter((_, j) => j !== i) })} />
        </Space>
      ))}
      <Button size="small" icon={<PlusOutlined />} data-testid={`add-env-${index}`} onClick={() => setRole(role.id, { env: [...role.env, { name: '', value: '' }] })}>
        {t('wizard.addEnv')}
      </Button>
    </Space>
  );
}

function RoleWorkerForm({ role, index }: { role: RoleDraft; index: number }) {
  const { t } = useTranslation();
  const { setRole, feedback, focusField } = useWizard();
  const clusters = useQuery({ queryKey: ['clusters'], queryFn: clustersApi.list });
  // Any cluster: the labels of every cluster's nodes, to select by wherever the scheduler places the role.
  const labels = useQuery({ queryKey: ['labels', role.cluster], queryFn: () => nodesApi.labels(role.cluster || undefined) });
  const selector = useDebounced(selectorQuery(role.selector), 300);
  const gpus = useDebounced(role.gpusPerWorker, 300);
  const match = useQuery({
    queryKey: ['match', role.cluster, selector, gpus],
    queryFn: () => nodesApi.match(role.cluster, selector, gpus),
    enabled: Boolean(role.cluster),
    placeholderData: (prev) => prev,
  });
  const limits = gpuLimits(match.data?.nodes ?? []);
  const at = `spec.tasks[${index}]`;
  const outline = (field: string) => (focusField && focusField.startsWith(`${at}.${field}`) ? 'field-highlight' : undefined);
  const imageHint = imageProblem(role.image);
  const invalidTerms = role.selector.filter((term) => !parseTerm(term));
  const options = (labels.data ?? []).flatMap((l) =>
    l.values.map((v) => ({ value: `${l.key}=${v.value}`, label: `${l.key}=${v.value} (${t('wizard.nodesCount', { count: v.nodes })})` })),
  );
  return (
    <Form layout="vertical" component="div">
      <Row gutter={16}>
        <Col span={8}>
          <Form.Item
            label={t('wizard.cluster')}
            className={outline('cluster')}
            {...(feedback(`${at}.cluster`).help ? feedback(`${at}.cluster`) : { extra: role.cluster ? undefined : t('wizard.anyClusterHint') })}
          >
            <Select
              data-testid={`role-cluster-${index}`}
              aria-label={t('wizard.cluster')}
              showSearch
              value={role.cluster || ANY_CLUSTER}
              loading={clusters.isLoading}
              onChange={(cluster: string) => setRole(role.id, { cluster: cluster === ANY_CLUSTER ? '' : cluster, selector: [] })}
              options={[
                { value: ANY_CLUSTER, label: t('wizard.anyCluster') },
                ...(clusters.data?.items ?? []).map((c) => ({
                  value: c.name,
                  label: `${c.display_name || c.name} · ${t('wizard.clusterFree', { free: c.summary.gpus_free, total: c.summary.gpus_allocatable })}${c.online ? '' : ` · ${t('common.offline')}`}`,
                })),
              ]}
            />
          </Form.Item>
        </Col>
        <Col span={16}>
          <Form.Item
            label={t('wizard.nodeSelector')}
            className={outline('nodeSelector')}
            extra={invalidTerms.length ? undefined : t('wizard.selectorHint')}
            {...(invalidTerms.length
              ? { validateStatus: 'error' as const, help: t('wizard.err.selectorTerm', { terms: invalidTerms.join(', ') }) }
              : feedback(`${at}.nodeSelector`))}
          >
            <Select
              mode="tags"
              data-testid={`role-selector-${index}`}
              aria-label={t('wizard.nodeSelector')}
              value={role.selector}
              onChange={(terms: string[]) => setRole(role.id, { selector: terms.map((s) => s.trim()).filter(Boolean) })}
              tokenSeparators={[',', ' ']}
              placeholder="rlark.io/gpu-model=A100"
              options={options}
              loading={labels.isLoading}
            />
          </Form.Item>
        </Col>
      </Row>
      <MatchLine role={role} />
      <Row gutter={16} style={{ marginTop: 12 }}>
        <Col span={8}>
          <Form.Item label={t('wizard.nodeCount')} required extra={t('wizard.nodeCountHint')} {...feedback(`${at}.replicas`)}>
            <InputNumber min={1} max={1024} precision={0} value={role.replicas} onChange={(v) => setRole(role.id, { replicas: typeof v === 'number' ? v : 1 })} aria-label={t('wizard.nodeCount')} style={{ width: '100%' }} />
          </Form.Item>
        </Col>
        <Col span={8}>
          <Form.Item
            label={t('wizard.gpusPerWorker')}
            className={outline('gpusPerWorker')}
            extra={
              limits.free !== null ? (
                <span data-testid={`gpu-max-${index}`}>
                  {limits.capacity !== null
                    ? t('wizard.gpuMaxBoth', { max: limits.capacity, free: limits.free })
                    : t('wizard.gpuMaxFree', { free: limits.free })}
                </span>
              ) : undefined
            }
            {...feedback(`${at}.gpusPerWorker`)}
          >
            <InputNumber
              min={0}
              max={limits.capacity ?? 64}
              precision={0}
              value={role.gpusPerWorker}
              onChange={(v) => setRole(role.id, { gpusPerWorker: typeof v === 'number' ? v : 0 })}
              aria-label={t('wizard.gpusPerWorker')}
              data-testid={`role-gpus-w-${index}`}
              style={{ width: '100%' }}
            />
          </Form.Item>
        </Col>
      </Row>
      <Form.Item
        label={t('wizard.image')}
        required
        className={outline('image')}
        {...(feedback(`${at}.image`).help
          ? feedback(`${at}.image`)
          : role.image && imageHint
            ? { validateStatus: 'warning' as const, help: t(imageHint) }
            : { extra: t('wizard.imageHint') })}
      >
        <Input
          className="mono"
          value={role.image}
          onChange={(e) => setRole(role.id, { image: e.target.value })}
          placeholder="registry.example.com/rlinf:v0.3.0-cuda12.4"
          aria-label={t('wizard.image')}
          data-testid={`role-image-${index}`}
          spellCheck={false}
        />
      </Form.Item>
      <Form.Item label={t('wizard.prepareScript')} extra={t('wizard.prepareHint')} className={outline('prepareScript')} {...feedback(`${at}.prepareScript`)}>
        <Input.TextArea
          className="mono"
          rows={3}
          value={role.prepareScript}
          onChange={(e) => setRole(role.id, { prepareScript: e.target.value })}
          placeholder="source /opt/venv/rlinf/bin/activate"
          aria-label={t('wizard.prepareScript')}
          spellCheck={false}
        />
      </Form.Item>
      <Form.Item label={t('wizard.mounts')} className={outline('mounts')} {...feedback(`${at}.mounts`)}>
        <MountsEditor role={role} index={index} />
      </Form.Item>
      <Form.Item label={t('wizard.env')} extra={t('wizard.envHint')} className={outline('env')} {...feedback(`${at}.env`)}>
        <EnvEditor role={role} index={index} />
      </Form.Item>
    </Form>
  );
}

export default function WorkerStep({ activeRole, onRoleChange }: { activeRole: string; onRoleChange: (id: string) => void }) {
  const { t } = useTranslation();
  const { state, feedback } = useWizard();
  return (
    <Tabs
      data-testid="worker-tabs"
      activeKey={activeRole}
      onChange={onRoleChange}
      items={state.roles.map((role, index) => {
        const hasError = Boolean(feedback(`spec.tasks[${index}]`).help);
        return {
          key: role.id,
          label: (
            <span>
              {role.name || t('wizard.unnamed')}
              {role.id === state.headerId && <Tag color="blue" style={{ marginLeft: 6 }}>Header</Tag>}
              {hasError && <Tag color="error" style={{ marginLeft: 4 }}>!</Tag>}
            </span>
          ),
          children: <RoleWorkerForm role={role} index={index} />,
        };
      })}
    />
  );
}
