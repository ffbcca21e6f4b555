/**
 * One cluster: summary cards, the label catalog (the values users copy into node selectors) and
 * the node table — category tabs, status filter, search and sort, all done by the server.
 */
import { App, Button, Card, Col, Descriptions, Input, Popconfirm, Row, Select, Space, Statistic, Table, Tabs, Tag, Tooltip, Typography } from 'antd';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import type { SorterResult } from 'antd/es/table/interface';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link, useNavigate, useParams } from 'react-router-dom';
import { clustersApi, nodesApi } from '../api/endpoints';
import { NODE_CATEGORY_LABEL, nodeCategoryOf } from '../api/normalize';
import type { ClusterNode, NodeStatus } from '../api/types';
import ApiErrorAlert, { errorMessage } from '../components/ApiErrorAlert';
import CredentialModal from '../components/CredentialModal';
import { GpuInUse } from '../components/GpuUsage';
import HostPathPolicy from '../components/HostPathPolicy';
import PageTitle from '../components/PageTitle';
import { NodeStatusTag, OnlineTag } from '../components/StatusTag';
import { useSession } from '../auth';
import { formatTime } from '../lib/format';

const SORT_FIELDS: Record<string, string> = { name: 'name', status: 'status', gpu_count: 'gpu_count', gpu_free: 'gpu_free', gpu_allocated: 'gpu_allocated', gpu_model: 'gpu_model' };

export default function ClusterDetail() {
  const { name = '' } = useParams();
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const navigate = useNavigate();
  const [category, setCategory] = useState<string>('');
  const [status, setStatus] = useState<NodeStatus | ''>('');
  const [q, setQ] = useState('');
  const [sort, setSort] = useState<string>('name');
  const [page, setPage] = useState({ page: 1, page_size: 20 });
  const [credential, setCredential] = useState<string | null>(null);

  const cluster = useQuery({ queryKey: ['cluster', name], queryFn: () => clustersApi.get(name) });
  const labels = useQuery({ queryKey: ['labels', name], queryFn: () => nodesApi.labels(name) });
  // Categories are the nodes' rlark.io/node-category label (the API's `category` is the cluster's).
  const nodeQuery = {
    cluster: name,
    selector: category ? `${NODE_CATEGORY_LABEL}=${category}` : undefined,
    status: status || undefined,
    q: q || undefined,
    sort,
    ...page,
  };
  const nodes = useQuery({ queryKey: ['nodes', nodeQuery], queryFn: () => nodesApi.list(nodeQuery), placeholderData: (prev) => prev });

  const refresh = () => {
    void client.invalidateQueries({ queryKey: ['nodes'] });
    void client.invalidateQueries({ queryKey: ['cluster', name] });
  };
  const cordon = useMutation({
    mutationFn: ({ node, on }: { node: string; on: boolean }) => (on ? nodesApi.cordon(name, node) : nodesApi.uncordon(name, node)),
    onSuccess: () => {
      void message.info(t('clusterDetail.cordonSent'));
      refresh();
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  const rotate = useMutation({
    mutationFn: () => clustersApi.rotateCredential(name),
    onSuccess: (result) => setCredential(result.agent_credential),
    onError: (err) => void message.error(errorMessage(err)),
  });
  const remove = useMutation({
    mutationFn: () => clustersApi.remove(name),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ['clusters'] });
      navigate('/clusters');
    },
    onError: (err) => void message.error(errorMessage(err)),
  });

  const c = cluster.data;
  const categories = labels.data?.find((l) => l.key === NODE_CATEGORY_LABEL)?.values ?? [];

  return (
    <>
      <PageTitle
        crumbs={[{ label: t('nav.clusters'), to: '/clusters' }, { label: name }]}
        title={
          <Space>
            {c?.display_name || name}
            {c && <OnlineTag online={c.online} />}
          </Space>
        }
        sub={c ? `${name} · ${c.category || '—'} · ${c.region || '—'} · ${c.runtime ?? ''}` : undefined}
        extra={
          isAdmin && (
            <>
              <Popconfirm title={t('clusterDetail.rotateConfirm')} onConfirm={() => rotate.mutate()}>
                <Button loading={rotate.isPending} data-testid="rotate-credential">{t('clusterDetail.rotate')}</Button>
              </Popconfirm>
              <Popconfirm title={t('clusterDetail.deleteConfirm')} onConfirm={() => remove.mutate()} okButtonProps={{ danger: true }}>
                <Button danger loading={remove.isPending}>{t('common.delete')}</Button>
              </Popconfirm>
            </>
          )
        }
      />
      <ApiErrorAlert error={cluster.error} />
      {c && (
        <Row gutter={[16, 16]} className="stat-row">
          <Col span={6}>
            <Card><Statistic title={t('clusters.nodesOnline')} value={c.summary.nodes_online} suffix={`/ ${c.summary.nodes_total}`} /></Card>
          </Col>
          <Col span={6}>
            <Card><Statistic title={t('clusters.onlineRate')} value={Math.round(c.summary.online_rate * 100)} suffix="%" /></Card>
          </Col>
          <Col span={6}>
            <Card data-testid="cluster-stat-gpus">
              <Statistic title={t('clusters.gpusFree')} value={c.summary.gpus_free} suffix={`/ ${c.summary.gpus_allocatable}`} />
              <GpuInUse allocated={c.summary.gpus_allocated} foreign={c.summary.gpus_allocated_foreign} />
            </Card>
          </Col>
          <Col span={6}>
            <Card><Statistic title={t('clusters.runningJobs')} value={c.summary.running_jobs} /></Card>
          </Col>
        </Row>
      )}
      {c && (
        <Card size="small" style={{ marginTop: 16 }}>
          <Descriptions
            size="small"
            column={3}
            items={[
              { key: 'pod', label: t('clusters.podCidrs'), children: (c.pod_cidrs ?? []).join(', ') || '—' },
              { key: 'svc', label: t('clusters.serviceCidrs'), children: (c.service_cidrs ?? []).join(', ') || '—' },
              { key: 'seen', label: t('clusters.lastSeen'), children: formatTime(c.last_seen) },
            ]}
          />
        </Card>
      )}
      {c && <HostPathPolicy cluster={name} editable={isAdmin} />}
      <Card title={t('clusterDetail.labels')} size="small" style={{ marginTop: 16 }} data-testid="label-catalog">
        <Typography.Paragraph type="secondary" style={{ marginBottom: 8 }}>
          {t('clusterDetail.labelsHint')}
        </Typography.Paragraph>
        {(labels.data ?? []).length === 0 && <Typography.Text type="secondary">{t('common.none')}</Typography.Text>}
        {(labels.data ?? []).map((l) => (
          <div key={l.key} className="label-chip">
            <Typography.Text strong className="mono">{l.key}</Typography.Text>{' '}
            {l.values.map((v) => (
              <Tooltip key={v.value} title={t('clusterDetail.nodesWithLabel', { count: v.nodes })}>
                <Tag>
                  <Typography.Text copyable={{ text: `${l.key}=${v.value}` }} className="mono">
                    {v.value} ({v.nodes})
                  </Typography.Text>
                </Tag>
              </Tooltip>
            ))}
          </div>
        ))}
      </Card>
      <Card title={t('clusterDetail.nodes')} style={{ marginTop: 16 }}>
        <Tabs
          data-testid="category-tabs"
          activeKey={category || '__all'}
          onChange={(key) => {
            setCategory(key === '__all' ? '' : key);
            setPage((p) => ({ ...p, page: 1 }));
          }}
          items={[
            { key: '__all', label: t('clusterDetail.allCategories') },
            ...categories.map((v) => ({ key: v.value, label: `${v.value} (${v.nodes})` })),
          ]}
        />
        <Space wrap style={{ marginBottom: 12 }}>
          <Select
            aria-label={t('clusterDetail.statusFilter')}
            data-testid="node-status-filter"
            style={{ width: 180 }}
            value={status}
            onChange={(v) => {
              setStatus(v);
              setPage((p) => ({ ...p, page: 1 }));
            }}
            options={[
              { value: '', label: t('clusterDetail.anyStatus') },
              ...(['ready', 'not_ready', 'cordoned', 'gone'] as NodeStatus[]).map((s) => ({ value: s, label: t(`nodeStatus.${s}`) })),
            ]}
          />
          <Input.Search
            allowClear
            aria-label={t('clusterDetail.search')}
            placeholder={t('clusterDetail.search')}
            data-testid="node-search"
            style={{ width: 300 }}
            onSearch={(v) => {
              setQ(v);
              setPage((p) => ({ ...p, page: 1 }));
            }}
          />
        </Space>
        <ApiErrorAlert error={nodes.error} />
        <Table<ClusterNode>
          data-testid="node-table"
          rowKey="name"
          size="small"
          loading={nodes.isFetching && !nodes.data}
          dataSource={nodes.data?.items ?? []}
          onChange={(pagination, _filters, sorter) => {
            const s = sorter as SorterResult<ClusterNode>;
            const field = SORT_FIELDS[String(s.field ?? s.columnKey ?? '')];
            setSort(field && s.order ? `${s.order === 'descend' ? '-' : ''}${field}` : 'name');
            setPage({ page: pagination.current ?? 1, page_size: pagination.pageSize ?? 20 });
          }}
          pagination={{ current: page.page, pageSize: page.page_size, total: nodes.data?.total ?? 0, showSizeChanger: true, showTotal: (n) => t('common.total', { count: n }) }}
          columns={[
            {
              title: t('nodes.name'),
              dataIndex: 'name',
              key: 'name',
              sorter: true,
              render: (n: string) => (
                <Link to={`/clusters/${encodeURIComponent(name)}/nodes/${encodeURIComponent(n)}`} className="nowrap">
                  {n}
                </Link>
              ),
            },
            { title: t('nodes.status'), dataIndex: 'status', key: 'status', sorter: true, render: (s: NodeStatus) => <NodeStatusTag status={s} /> },
            { title: t('nodes.schedulable'), dataIndex: 'schedulable', render: (v: boolean) => (v ? t('common.yes') : <Tag color="warning">{t('nodes.cordoned')}</Tag>) },
            { title: t('nodes.category'), key: 'category', render: (_: unknown, node: ClusterNode) => nodeCategoryOf(node) || '—' },
            { title: t('nodes.gpuModel'), dataIndex: 'gpu_model', key: 'gpu_model', sorter: true, render: (v?: string) => v || '—' },
            { title: t('nodes.gpus'), dataIndex: 'gpu_count', key: 'gpu_count', sorter: true },
            { title: t('nodes.gpusFree'), dataIndex: 'gpu_free', key: 'gpu_free', sorter: true },
            {
              title: t('gpu.inUseTitle'),
              dataIndex: 'gpu_allocated',
              key: 'gpu_allocated',
              sorter: true,
              render: (_: unknown, node: ClusterNode) => <GpuInUse allocated={node.gpu_allocated} foreign={node.gpu_allocated_foreign} />,
            },
            {
              title: t('nodes.labels'),
              dataIndex: 'labels',
              render: (labels: Record<string, string>) => {
                // The platform's labels, keys in full: they are what a node selector must name.
                const entries = Object.entries(labels).filter(([k]) => k.startsWith('rlark.io/'));
                return entries.map(([k, v]) => (
                  <Tag key={k} className="mono">
                    {k}={v}
                  </Tag>
                ));
              },
            },
            ...(isAdmin
              ? [
                  {
                    title: t('common.actions'),
                    key: 'actions',
                    render: (_: unknown, node: ClusterNode) => (
                      <Button size="small" onClick={() => cordon.mutate({ node: node.name, on: node.schedulable })} disabled={node.status === 'gone'}>
                        {node.schedulable ? t('nodes.cordon') : t('nodes.uncordon')}
                      </Button>
                    ),
                  },
                ]
              : []),
          ]}
        />
      </Card>
      <CredentialModal credential={credential} cluster={name} onClose={() => setCredential(null)} />
    </>
  );
}
