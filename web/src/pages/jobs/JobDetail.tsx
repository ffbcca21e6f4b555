/**
 * One job: state and reason, the pending explanation (per-role funnel counts and suggestions),
 * the status timeline, workers (node, address, GPUs, phase, Ray joined, SSH command), live logs,
 * outputs, TensorBoard, SSH-key rotation without restart, cancel, and requeue (stop the placed attempt
 * on purpose and start the next one, which resumes per spec.resume and uses up no restart; ADR 0014).
 */
import { Alert, App, Button, Card, Col, Descriptions, Empty, Form, Modal, Popconfirm, Row, Select, Space, Table, Tabs, Tag, Timeline, Typography } from 'antd';
import { DownloadOutlined, ExportOutlined, RedoOutlined, StopOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link, useParams } from 'react-router-dom';
import { jobsApi, keysApi } from '../../api/endpoints';
import { useSession } from '../../auth';
import { outputFilesOf } from '../../api/normalize';
import { outputsApi } from '../../api/outputs';
import { TERMINAL_STATES, type JobAttempt, type JobDetail as JobDetailType, type OutputFile, type PendingRole, type ServerSaid, type TimelineEntry, type Worker } from '../../api/types';
import ApiErrorAlert, { errorMessage } from '../../components/ApiErrorAlert';
import PageTitle from '../../components/PageTitle';
import { JobStatusTag, PhaseTag } from '../../components/StatusTag';
import { useServerText } from '../../i18n/server';
import { formatBytes, formatTime } from '../../lib/format';
import LogViewer from './LogViewer';
import UsageTab from './UsageTab';

/** An output file as listed: the manifest's fields, and its time where the worker's agent answered. */
type OutputRow = OutputFile & { mtime?: number | null };

/** The states a requeue accepts (the scheduler's `job_not_placed` refuses the rest). */
const PLACED_STATES: readonly string[] = ['Scheduled', 'Starting', 'Running'];

/**
 * The SSH command for one worker of a running job: `rlark ssh JOB/ROLE-INDEX`, through the platform (the
 * worker's own address is not reachable from the user's machine). Null while the job holds no workers.
 */
export function sshCommandOf(jobId: string, worker: Worker, status: string): string | null {
  if (!['Scheduled', 'Running'].includes(status) || !worker.role) return null;
  return `rlark ssh ${jobId}/${worker.role}-${worker.index}`;
}

/** The OpenSSH config for every worker of a job (`ssh`, `scp`, `rsync`, VS Code Remote-SSH). */
export function sshConfigCommandOf(jobId: string): string {
  return `rlark ssh-config ${jobId} >> ~/.ssh/config`;
}

function rayJoined(worker: Worker, t: (k: string, o?: Record<string, unknown>) => string, job?: JobDetailType): React.ReactNode {
  const joined = worker.ray_nodes_joined ?? (worker.is_header ? job?.ray_nodes?.joined : undefined);
  const expected = worker.ray_nodes_expected ?? (worker.is_header ? job?.ray_nodes?.expected : undefined);
  if (joined !== undefined && joined !== null && expected) {
    const done = joined >= expected;
    return <Tag color={done ? 'success' : 'processing'}>{`${joined}/${expected}`}</Tag>;
  }
  if (worker.ray_joined === undefined) return '—';
  return worker.ray_joined ? <Tag color="success">{t('common.yes')}</Tag> : <Tag>{t('common.no')}</Tag>;
}

function selectorText(selector: PendingRole['selector']): string {
  if (!selector) return '—';
  if (typeof selector === 'string') return selector || '—';
  return Object.entries(selector).map(([k, v]) => `${k}=${v}`).join(',') || '—';
}

/** Submission warnings that forecast a wait ("the job stays Pending until …"): true only while Pending. */
const WAITING_WARNINGS = new Set(['selector_matches_too_few', 'cluster_offline']);

/** The warnings that still hold for a job in its current state. */
function currentWarnings(job: Pick<JobDetailType, 'status' | 'warnings'>) {
  return (job.warnings ?? []).filter((w) => job.status === 'Pending' || !WAITING_WARNINGS.has(w.code ?? ''));
}

/** Count columns: a short number under a header that must not break into one character per line. */
const nowrapHeader = () => ({ style: { whiteSpace: 'nowrap' as const } });

function PendingCard({ job }: { job: JobDetailType }) {
  const { t } = useTranslation();
  const { sayAll } = useServerText();
  const pending = job.pending;
  // The explanation may outlive the wait in the job's record; it is shown only while Pending.
  if (job.status !== 'Pending' || !pending || !pending.roles?.length) return null;
  return (
    <Card title={t('jobDetail.whyPending')} size="small" style={{ marginBottom: 16 }} data-testid="pending-explanation">
      {pending.message && pending.message !== job.reason && <Alert type="warning" showIcon title={sayAll(pending.parts, pending.message)} style={{ marginBottom: 12 }} />}
      {(pending.conflicts ?? []).map((c, i) => (
        <Alert key={i} type="error" showIcon style={{ marginBottom: 12 }} title={sayAll(c.parts, c.message)} data-testid="pending-conflict" />
      ))}
      <Table<PendingRole>
        size="small"
        rowKey="role"
        pagination={false}
        dataSource={pending.roles}
        columns={[
          { title: t('workers.role'), dataIndex: 'role', render: (v: string) => <strong>{v}</strong> },
          { title: t('wizard.cluster'), dataIndex: 'cluster', render: (v: string) => <span className="nowrap">{v}</span> },
          { title: t('wizard.nodeSelector'), render: (_, r) => <span className="mono">{selectorText(r.selector)}</span> },
          { title: t('jobDetail.needed'), render: (_, r) => t('jobDetail.neededText', { count: r.needed, gpus: r.gpus_per_worker }) },
          { title: t('jobDetail.matching'), dataIndex: 'matching', onHeaderCell: nowrapHeader },
          { title: t('jobDetail.ready'), dataIndex: 'ready', onHeaderCell: nowrapHeader },
          { title: t('jobDetail.schedulable'), dataIndex: 'schedulable', onHeaderCell: nowrapHeader },
          { title: t('jobDetail.enoughGpus'), dataIndex: 'enough', onHeaderCell: nowrapHeader, render: (v: number, r) => <Typography.Text type={v < r.needed ? 'danger' : undefined}>{v}</Typography.Text> },
          {
            title: t('jobDetail.explanation'),
            render: (_, r) => (
              <Space orientation="vertical" size={2}>
                <span>{sayAll(r.parts, r.message)}</span>
                {(r.alternatives ?? []).map((a) => (
                  <Tag color="green" key={a.cluster}>
                    {t('jobDetail.wouldFit', { cluster: a.cluster, nodes: a.nodes })}
                  </Tag>
                ))}
              </Space>
            ),
          },
        ]}
      />
    </Card>
  );
}

function KeysModal({ job, open, onClose }: { job: JobDetailType; open: boolean; onClose: () => void }) {
  const { t } = useTranslation();
  const client = useQueryClient();
  const keys = useQuery({ queryKey: ['keys', false], queryFn: () => keysApi.list(false), enabled: open });
  const [names, setNames] = useState<string[]>(job.ssh_keys ?? job.spec?.spec.sshKeys ?? []);
  const update = useMutation({
    mutationFn: () => jobsApi.setSshKeys(job.id, names),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ['job', job.id] });
      onClose();
    },
  });
  return (
    <Modal open={open} title={t('jobDetail.updateKeys')} onCancel={onClose} onOk={() => update.mutate()} confirmLoading={update.isPending} destroyOnHidden>
      <Space orientation="vertical" style={{ width: '100%' }}>
        <Typography.Text type="secondary">{t('jobDetail.updateKeysHint')}</Typography.Text>
        <ApiErrorAlert error={update.error} />
        <Form layout="vertical" component="div">
          <Form.Item label={t('wizard.sshKeys')}>
            <Select
              mode="multiple"
              aria-label={t('wizard.sshKeys')}
              value={names}
              onChange={setNames}
              options={(keys.data?.items ?? []).map((k) => ({ value: k.name, label: `${k.name} · ${k.fingerprint}` }))}
            />
          </Form.Item>
        </Form>
      </Space>
    </Modal>
  );
}

/** A timeline row's sentence: the pending clauses or the keyed reason it kept (ADR 0011). */
function timelineSaid(e: TimelineEntry): { parts?: ServerSaid[]; said?: ServerSaid } {
  const details = e.details ?? {};
  const parts = Array.isArray(details.parts) ? (details.parts as ServerSaid[]) : undefined;
  const said = details.said && typeof details.said === 'object' ? (details.said as ServerSaid) : undefined;
  return { parts, said };
}

export default function JobDetail() {
  const { id = '' } = useParams();
  const { t } = useTranslation();
  const { say, sayAll, sayReason } = useServerText();
  const timelineText = (e: TimelineEntry) => {
    const { parts, said } = timelineSaid(e);
    return parts ? sayAll(parts, e.reason) : say({ ...said, message: e.reason });
  };
  /** The job's reason as the server keyed it, else by its pending explanation or the timeline row that wrote it. */
  const jobReason = (j: JobDetailType) => {
    if (j.reason_said) return sayReason(j);
    if (j.status === 'Pending' && j.pending?.parts && j.pending.message === j.reason) return sayAll(j.pending.parts, j.reason);
    const row = [...j.timeline].reverse().find((e) => e.reason === j.reason && e.to_status === j.status);
    return row ? timelineText(row) : (j.reason ?? '');
  };
  const { message } = App.useApp();
  const client = useQueryClient();
  const [keysOpen, setKeysOpen] = useState(false);
  const job = useQuery({
    queryKey: ['job', id],
    queryFn: () => jobsApi.get(id),
    // A safety net under the live stream below: a running job is re-read now and then anyway.
    refetchInterval: (query) => (query.state.data && TERMINAL_STATES.includes(query.state.data.status) ? false : 15_000),
  });
  const live = !job.data || !TERMINAL_STATES.includes(job.data.status);
  useEffect(() => {
    // The job's own timeline stream (status, worker phases, pending reasons, keys): any event
    // re-reads the job, at most every 500 ms.
    if (!live || typeof EventSource === 'undefined') return undefined;
    const source = new EventSource(jobsApi.eventsUrl(id), { withCredentials: true });
    let timer: ReturnType<typeof setTimeout> | null = null;
    const refresh = () => {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        void client.invalidateQueries({ queryKey: ['job', id] });
      }, 500);
    };
    for (const kind of ['status', 'worker', 'pending', 'keys', 'cluster', 'end']) source.addEventListener(kind, refresh);
    source.onmessage = refresh;
    source.addEventListener('end', () => source.close());
    return () => {
      source.close();
      if (timer) clearTimeout(timer);
    };
  }, [id, live, client]);
  const cancel = useMutation({
    mutationFn: () => jobsApi.cancel(id),
    onSuccess: () => {
      void message.info(t('jobDetail.cancelRequested'));
      void client.invalidateQueries({ queryKey: ['job', id] });
      void client.invalidateQueries({ queryKey: ['jobs'] });
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  const requeue = useMutation({
    mutationFn: () => jobsApi.requeue(id),
    onSuccess: () => {
      void message.info(t('jobDetail.requeueRequested'));
      void client.invalidateQueries({ queryKey: ['job', id] });
      void client.invalidateQueries({ queryKey: ['jobs'] });
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  const { user, isAdmin } = useSession();
  const j = job.data;
  const mayControl = Boolean(j) && (isAdmin || user?.username === j?.owner);
  const terminal = j ? TERMINAL_STATES.includes(j.status) : true;
  const declaredOutputs = j?.spec?.spec.outputs ?? [];
  const listing = useQuery({
    queryKey: ['job-outputs', id],
    queryFn: () => outputsApi.list(id),
    enabled: Boolean(j) && declaredOutputs.length > 0 && (j?.workers.length ?? 0) > 0,
    retry: false,
  });
  // Live from the workers' agents where they answer; the scheduler's manifest otherwise.
  const outputs: { files: OutputRow[]; truncated: boolean } = listing.data
    ? {
        files: listing.data.files.map((f) => ({ worker_id: f.worker, path: f.path, size: f.size, mtime: f.mtime })),
        truncated: listing.data.workers.some((w) => w.truncated),
      }
    : j
      ? outputFilesOf(j)
      : { files: [], truncated: false };
  const header = j?.workers.find((w) => w.is_header || w.rank === 0) ?? j?.workers[0];
  const keyNames = j?.ssh_keys ?? j?.spec?.spec.sshKeys ?? [];
  const tensorboardDir = j?.tensorboard_dir ?? j?.spec?.spec.tensorboardDir;
  const warnings = j ? currentWarnings(j) : [];

  return (
    <>
      <PageTitle
        crumbs={[{ label: t('nav.jobs'), to: '/jobs' }, { label: j?.name ?? id }]}
        title={
          <Space>
            {j?.name ?? id}
            {j && <JobStatusTag status={j.status} />}
          </Space>
        }
        sub={<span className="mono">{id}</span>}
        extra={
          j && (
            <>
              {tensorboardDir && j.workers.length > 0 && (
                <Button
                  icon={<ExportOutlined />}
                  href={j.tensorboard_url ?? outputsApi.toolUrl(j.id, 'tensorboard')}
                  target="_blank"
                  rel="noreferrer"
                  data-testid="tensorboard-link"
                >
                  TensorBoard
                </Button>
              )}
              {j.status === 'Running' && header && (
                <Button
                  icon={<ExportOutlined />}
                  href={j.ray_dashboard_url ?? outputsApi.toolUrl(j.id, 'ray-dashboard')}
                  target="_blank"
                  rel="noreferrer"
                  data-testid="ray-dashboard-link"
                >
                  {t('jobDetail.rayDashboard')}
                </Button>
              )}
              {!terminal && (
                <Button onClick={() => setKeysOpen(true)} data-testid="update-keys">
                  {t('jobDetail.updateKeys')}
                </Button>
              )}
              {mayControl && PLACED_STATES.includes(j.status) && (
                <Popconfirm
                  title={t('jobDetail.requeueConfirm')}
                  description={<div style={{ maxWidth: 360 }}>{t('jobDetail.requeueConfirmHint')}</div>}
                  onConfirm={() => requeue.mutate()}
                >
                  <Button icon={<RedoOutlined />} loading={requeue.isPending} data-testid="requeue-job">
                    {t('jobDetail.requeue')}
                  </Button>
                </Popconfirm>
              )}
              {!terminal && (
                <Popconfirm title={t('jobDetail.cancelConfirm')} onConfirm={() => cancel.mutate()} okButtonProps={{ danger: true }}>
                  <Button danger icon={<StopOutlined />} loading={cancel.isPending} data-testid="cancel-job">
                    {t('jobDetail.cancel')}
                  </Button>
                </Popconfirm>
              )}
            </>
          )
        }
      />
      <ApiErrorAlert error={job.error} />
      {j && (
        <>
          {j.reason && (
            <Alert
              type={j.status === 'Failed' || j.status === 'Lost' ? 'error' : j.status === 'Pending' ? 'warning' : 'info'}
              showIcon
              title={jobReason(j)}
              style={{ marginBottom: 16 }}
              data-testid="job-reason"
            />
          )}
          {warnings.length > 0 && (
            <Alert
              type="warning"
              showIcon
              style={{ marginBottom: 16 }}
              data-testid="job-warnings"
              title={t('jobDetail.warnings')}
              description={
                <ul className="plain-list">
                  {warnings.map((w, i) => (
                    <li key={i}>
                      {w.field && !w.message.startsWith(w.field) && <code>{w.field}</code>} {say(w)}
                    </li>
                  ))}
                </ul>
              }
            />
          )}
          <PendingCard job={j} />
          <Row gutter={16}>
            <Col span={8}>
              <Card title={t('jobDetail.summary')} size="small" style={{ marginBottom: 16 }}>
                <Descriptions
                  size="small"
                  column={1}
                  items={[
                    { key: 'owner', label: t('jobs.owner'), children: j.owner },
                    { key: 'sub', label: t('jobs.submittedAt'), children: formatTime(j.created_at) },
                    { key: 'start', label: t('jobDetail.startedAt'), children: formatTime(j.started_at) },
                    { key: 'fin', label: t('jobDetail.finishedAt'), children: formatTime(j.ended_at) },
                    ...(j.exit_code !== undefined && j.exit_code !== null ? [{ key: 'exit', label: t('jobDetail.exitCode'), children: j.exit_code }] : []),
                    ...(j.spec?.spec.restartPolicy || (j.attempt ?? 1) > 1
                      ? [
                          {
                            key: 'attempt',
                            label: t('jobDetail.attempt'),
                            children: (
                              <span data-testid="job-attempt">
                                {t('jobDetail.attemptOf', { attempt: j.attempt ?? 1, restarts: j.restarts ?? 0, max: j.spec?.spec.restartPolicy?.maxRestarts ?? 0 })}
                              </span>
                            ),
                          },
                        ]
                      : []),
                    { key: 'workers', label: t('jobs.workers'), children: `${j.worker_count ?? j.workers.length} · ${t('jobDetail.gpus', { count: j.gpu_count ?? 0 })}` },
                    { key: 'header', label: t('wizard.header'), children: j.spec?.spec.header ?? header?.role ?? '—' },
                    { key: 'ray', label: t('jobDetail.rayNodes'), children: j.ray_nodes ? `${j.ray_nodes.joined}/${j.ray_nodes.expected}` : '—' },
                    { key: 'domain', label: t('wizard.networkDomain'), children: j.network_domain ?? j.spec?.spec.networkDomain ?? '—' },
                    { key: 'keys', label: t('wizard.sshKeys'), children: keyNames.length ? <Space size={4} wrap>{keyNames.map((k) => <Tag key={k}>{k}</Tag>)}</Space> : '—' },
                    ...(tensorboardDir ? [{ key: 'tb', label: t('wizard.tensorboardDir'), children: <span className="mono">{tensorboardDir}</span> }] : []),
                    ...(header && sshCommandOf(j.id, header, j.status)
                      ? [
                          { key: 'ssh', label: t('jobDetail.ssh'), children: <Typography.Text copyable className="mono" data-testid="job-ssh">{`rlark ssh ${j.id}`}</Typography.Text> },
                          { key: 'sshConfig', label: t('jobDetail.sshConfig'), children: <Typography.Text copyable className="mono" data-testid="job-ssh-config">{sshConfigCommandOf(j.id)}</Typography.Text> },
                        ]
                      : []),
                  ]}
                />
              </Card>
              <Card title={t('jobDetail.timeline')} size="small" data-testid="job-timeline">
                {j.timeline.length ? (
                  <Timeline
                    items={j.timeline.map((e, i) => ({
                      key: i,
                      color:
                        e.to_status === 'Failed' || e.to_status === 'Lost'
                          ? 'red'
                          : e.kind === 'cluster'
                            ? e.details?.online === false
                              ? 'orange'
                              : 'green'
                            : e.to_status === 'Succeeded'
                              ? 'green'
                              : 'blue',
                      title: (
                        <Space size={4} wrap>
                          <JobStatusTag status={e.to_status} />
                          <Typography.Text type="secondary">{formatTime(e.at)}</Typography.Text>
                        </Space>
                      ),
                      content: e.reason ? <Typography.Text>{timelineText(e)}</Typography.Text> : null,
                    }))}
                  />
                ) : (
                  <Empty image={Empty.PRESENTED_IMAGE_SIMPLE} />
                )}
              </Card>
            </Col>
            <Col span={16}>
              <Tabs
                defaultActiveKey="workers"
                items={[
                  {
                    key: 'workers',
                    label: t('jobDetail.workers', { count: j.workers.length }),
                    children: (
                      <Table<Worker>
                        data-testid="workers-table"
                        size="small"
                        rowKey="worker_id"
                        pagination={{ hideOnSinglePage: true, pageSize: 50 }}
                        dataSource={j.workers}
                        scroll={{ x: 'max-content' }}
                        columns={[
                          { title: t('workers.role'), render: (_, w) => <span>{w.role}-{w.index}{(w.is_header || w.rank === 0) && <Tag color="blue" style={{ marginLeft: 6 }}>Header</Tag>}</span> },
                          {
                            title: t('workers.node'),
                            render: (_, w) => (w.node ? <Link to={`/clusters/${encodeURIComponent(w.cluster)}/nodes/${encodeURIComponent(w.node)}`}>{w.cluster}/{w.node}</Link> : `${w.cluster}/—`),
                          },
                          { title: t('workers.address'), render: (_, w) => <span className="mono">{w.virtual_ip || w.address || '—'}</span> },
                          { title: t('workers.gpus'), dataIndex: 'gpus' },
                          {
                            title: t('workers.phase'),
                            render: (_, w) => (
                              <Space orientation="vertical" size={0}>
                                <PhaseTag phase={w.phase} />
                                {w.reason && <Typography.Text type="secondary" style={{ fontSize: 12, display: 'inline-block', maxWidth: 120 }}>{sayReason(w)}</Typography.Text>}
                                {w.exit_code !== undefined && w.exit_code !== null && <Typography.Text type="secondary" style={{ fontSize: 12 }}>{t('workers.exitCode', { code: w.exit_code })}</Typography.Text>}
                              </Space>
                            ),
                          },
                          { title: t('workers.rayJoined'), render: (_, w) => rayJoined(w, t, j) },
                          {
                            title: t('workers.ssh'),
                            render: (_, w) => {
                              const command = sshCommandOf(j.id, w, j.status);
                              return command ? (
                                <Typography.Text
                                  copyable={{ text: command }}
                                  ellipsis={{ tooltip: command }}
                                  className="mono"
                                  style={{ maxWidth: 180 }}
                                  data-testid={`ssh-${w.worker_id}`}
                                >
                                  {command}
                                </Typography.Text>
                              ) : (
                                '—'
                              );
                            },
                          },
                        ]}
                      />
                    ),
                  },
                  ...((j.attempts?.length ?? 0) > 1
                    ? [
                        {
                          key: 'attempts',
                          label: t('jobDetail.attempts'),
                          children: (
                            <Table<JobAttempt>
                              data-testid="attempts-table"
                              size="small"
                              rowKey="number"
                              pagination={false}
                              dataSource={j.attempts}
                              columns={[
                                { title: t('jobDetail.attemptNumber'), dataIndex: 'number' },
                                { title: t('jobDetail.attemptStarted'), dataIndex: 'started_at', render: (v: string) => formatTime(v) },
                                { title: t('jobDetail.attemptEnded'), dataIndex: 'ended_at', render: (v?: string | null) => (v ? formatTime(v) : '—') },
                                { title: t('jobDetail.attemptReason'), render: (_: unknown, a: JobAttempt) => (a.reason ? sayReason(a) : '—') },
                              ]}
                            />
                          ),
                        },
                      ]
                    : []),
                  {
                    key: 'logs',
                    label: t('logs.title'),
                    children: <LogViewer jobId={j.id} workers={j.workers} active={!terminal} />,
                  },
                  {
                    key: 'usage',
                    label: t('usage.title'),
                    children: <UsageTab jobId={j.id} active={!terminal} />,
                  },
                  {
                    key: 'outputs',
                    label: t('jobDetail.outputs', { count: outputs.files.length }),
                    children: (
                      <Space orientation="vertical" style={{ width: '100%' }}>
                        {outputs.truncated && <Alert type="info" showIcon title={t('jobDetail.outputsTruncated')} />}
                        <Table<OutputRow>
                          data-testid="outputs-table"
                          size="small"
                          rowKey={(f) => `${f.worker_id ?? ''}:${f.path}`}
                          dataSource={outputs.files}
                          pagination={{ hideOnSinglePage: true, pageSize: 100 }}
                          locale={{ emptyText: j.spec?.spec.outputs?.length ? t('jobDetail.outputsLater') : t('jobDetail.noOutputs') }}
                          columns={[
                            { title: t('jobDetail.path'), dataIndex: 'path', render: (v: string) => <span className="mono">{v}</span> },
                            { title: t('jobDetail.size'), dataIndex: 'size', render: formatBytes },
                            {
                              title: t('jobDetail.modified'),
                              dataIndex: 'mtime',
                              render: (v?: number | null) => (v ? formatTime(new Date(v * 1000).toISOString()) : '—'),
                            },
                            { title: t('workers.worker'), dataIndex: 'worker_id', render: (v?: string) => v ?? '—' },
                            {
                              title: '',
                              key: 'download',
                              render: (_: unknown, f: OutputRow) => (
                                <Button
                                  size="small"
                                  icon={<DownloadOutlined />}
                                  href={outputsApi.downloadUrl(j.id, f.worker_id, f.path)}
                                  download
                                  data-testid={`download-${f.path}`}
                                >
                                  {t('jobDetail.download')}
                                </Button>
                              ),
                            },
                          ]}
                        />
                        {j.workers.length > 0 && declaredOutputs.length > 0 && (
                          <Space wrap data-testid="download-dirs">
                            {j.workers.flatMap((w) =>
                              declaredOutputs.map((path) => (
                                <Button
                                  key={`${w.id}:${path}`}
                                  size="small"
                                  icon={<DownloadOutlined />}
                                  href={outputsApi.downloadUrl(j.id, w.id, path)}
                                  download
                                >
                                  {t('jobDetail.downloadDir', { path, worker: `${w.role}-${w.index}` })}
                                </Button>
                              )),
                            )}
                          </Space>
                        )}
                        {listing.data?.workers
                          .filter((w) => w.source !== 'agent')
                          .map((w) => (
                            <Alert
                              key={w.worker}
                              type="warning"
                              showIcon
                              title={t(w.source === 'manifest' ? 'jobDetail.outputsFromManifest' : 'jobDetail.outputsUnavailable', { worker: w.worker })}
                              description={w.reason ?? undefined}
                            />
                          ))}
                      </Space>
                    ),
                  },
                  {
                    key: 'yaml',
                    label: 'YAML',
                    children: <pre className="yaml-view mono">{j.yaml ?? (j.spec ? JSON.stringify(j.spec, null, 2) : '')}</pre>,
                  },
                ]}
              />
            </Col>
          </Row>
          <KeysModal job={j} open={keysOpen} onClose={() => setKeysOpen(false)} />
        </>
      )}
    </>
  );
}
