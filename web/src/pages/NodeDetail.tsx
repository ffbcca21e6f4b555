/** One node: readiness, scheduling, GPU model and count, resources, labels (copyable), workers. */
import { Card, Col, Descriptions, Progress, Row, Space, Table, Tag, Typography } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { Link, useParams } from 'react-router-dom';
import { nodesApi } from '../api/endpoints';
import type { NodeWorker } from '../api/types';
import ApiErrorAlert from '../components/ApiErrorAlert';
import { GpuInUse } from '../components/GpuUsage';
import PageTitle from '../components/PageTitle';
import { NodeStatusTag, PhaseTag } from '../components/StatusTag';
import { formatBytes, formatCpu, formatTime, percent } from '../lib/format';

function Usage({ used, total, format }: { used?: number; total?: number; format: (v?: number) => string }) {
  if (total === undefined) return <>—</>;
  return (
    <Space orientation="vertical" size={0} style={{ width: 220 }}>
      <span>
        {format(used ?? 0)} / {format(total)}
      </span>
      <Progress percent={percent(used ?? 0, total)} size="small" />
    </Space>
  );
}

export default function NodeDetail() {
  const { cluster = '', node = '' } = useParams();
  const { t } = useTranslation();
  const detail = useQuery({ queryKey: ['node', cluster, node], queryFn: () => nodesApi.get(cluster, node) });
  const n = detail.data;
  const labels = Object.entries(n?.labels ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return (
    <>
      <PageTitle
        crumbs={[
          { label: t('nav.clusters'), to: '/clusters' },
          { label: cluster, to: `/clusters/${encodeURIComponent(cluster)}` },
          { label: node },
        ]}
        title={
          <Space>
            {node}
            {n && <NodeStatusTag status={n.status} />}
          </Space>
        }
      />
      <ApiErrorAlert error={detail.error} />
      {n && (
        <Row gutter={[16, 16]}>
          <Col span={12}>
            <Card title={t('nodeDetail.state')} size="small" data-testid="node-state">
              <Descriptions
                size="small"
                column={1}
                items={[
                  { key: 'ready', label: t('nodeDetail.ready'), children: n.ready ? t('common.yes') : <Tag color="error">{t('common.no')}</Tag> },
                  { key: 'sched', label: t('nodes.schedulable'), children: n.schedulable ? t('common.yes') : <Tag color="warning">{t('nodes.cordoned')}</Tag> },
                  { key: 'model', label: t('nodes.gpuModel'), children: n.gpu_model || '—' },
                  { key: 'count', label: t('nodes.gpus'), children: n.gpu_count },
                  { key: 'addr', label: t('nodeDetail.addresses'), children: (n.addresses ?? []).join(', ') || '—' },
                  { key: 'seen', label: t('nodeDetail.observedAt'), children: formatTime(n.observed_at) },
                ]}
              />
            </Card>
          </Col>
          <Col span={12}>
            <Card title={t('nodeDetail.resources')} size="small" data-testid="node-resources">
              <Descriptions
                size="small"
                column={1}
                items={[
                  {
                    key: 'gpu',
                    label: t('nodeDetail.gpuAllocated'),
                    children: (
                      <Space orientation="vertical" size={0} data-testid="node-gpus">
                        <Usage used={n.gpu_allocated} total={n.gpu_allocatable ?? n.gpu_count} format={(v) => String(v ?? 0)} />
                        <GpuInUse allocated={n.gpu_allocated} foreign={n.gpu_allocated_foreign} />
                        <Typography.Text>{t('gpu.free', { n: n.gpu_free ?? 0 })}</Typography.Text>
                      </Space>
                    ),
                  },
                  {
                    key: 'cpu',
                    label: t('nodeDetail.cpu'),
                    children: <Usage used={n.cpu_allocated_millis} total={n.cpu_allocatable_millis ?? n.cpu_millis} format={formatCpu} />,
                  },
                  {
                    key: 'mem',
                    label: t('nodeDetail.memory'),
                    children: <Usage used={n.memory_allocated_bytes} total={n.memory_allocatable_bytes ?? n.memory_bytes} format={formatBytes} />,
                  },
                ]}
              />
            </Card>
          </Col>
          <Col span={24}>
            <Card title={t('nodes.labels')} size="small" data-testid="node-labels">
              <Typography.Paragraph type="secondary">{t('nodeDetail.labelsHint')}</Typography.Paragraph>
              <Table
                size="small"
                rowKey={([k]) => k}
                pagination={false}
                dataSource={labels}
                columns={[
                  { title: t('nodeDetail.labelKey'), render: (_, [k]) => <span className="mono">{k}</span> },
                  { title: t('nodeDetail.labelValue'), render: (_, [, v]) => <span className="mono">{v}</span> },
                  {
                    title: t('nodeDetail.selectorTerm'),
                    render: (_, [k, v]) => (
                      <Typography.Text copyable={{ text: `${k}=${v}`, tooltips: [t('common.copy'), t('common.copied')] }} className="mono">
                        {`${k}=${v}`}
                      </Typography.Text>
                    ),
                  },
                ]}
              />
            </Card>
          </Col>
          <Col span={24}>
            <Card title={t('nodeDetail.workers')} size="small" data-testid="node-workers">
              <Table<NodeWorker>
                size="small"
                rowKey={(w) => w.worker_id ?? `${w.job_id}-${w.role ?? ''}`}
                pagination={false}
                dataSource={n.workers ?? []}
                columns={[
                  { title: t('jobs.job'), dataIndex: 'job_id', render: (id: string, w) => <Link to={`/jobs/${encodeURIComponent(id)}`}>{w.job_name || id}</Link> },
                  { title: t('workers.worker'), render: (_, w) => <span className="mono">{w.role ?? w.worker_id ?? '—'}</span> },
                  { title: t('workers.gpus'), dataIndex: 'gpus', render: (v?: number) => v ?? '—' },
                  { title: t('workers.phase'), dataIndex: 'phase', render: (p?: string) => (p ? <PhaseTag phase={p} /> : '—') },
                  { title: t('nodeDetail.reportedAt'), dataIndex: 'reported_at', render: formatTime },
                ]}
              />
            </Card>
          </Col>
        </Row>
      )}
    </>
  );
}
