/** Cluster list with each cluster's summary (user guide step 1). */
import { Input, Progress, Table, Tooltip } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useMemo, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link, useNavigate } from 'react-router-dom';
import { clustersApi } from '../api/endpoints';
import type { Cluster } from '../api/types';
import ApiErrorAlert from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { GpuInUse } from '../components/GpuUsage';
import { OnlineTag } from '../components/StatusTag';
import { formatTime, percent } from '../lib/format';

export default function Clusters() {
  const { t } = useTranslation();
  const navigate = useNavigate();
  const [q, setQ] = useState('');
  const clusters = useQuery({ queryKey: ['clusters'], queryFn: clustersApi.list });
  const rows = useMemo(() => {
    const needle = q.trim().toLowerCase();
    return (clusters.data?.items ?? []).filter(
      (c) => !needle || [c.name, c.display_name, c.category, c.region].some((v) => v?.toLowerCase().includes(needle)),
    );
  }, [clusters.data, q]);
  return (
    <>
      <PageTitle
        title={t('clusters.title')}
        sub={t('clusters.sub')}
        extra={
          <Input.Search
            allowClear
            placeholder={t('clusters.search')}
            aria-label={t('clusters.search')}
            onChange={(e) => setQ(e.target.value)}
            style={{ width: 260 }}
            data-testid="clusters-search"
          />
        }
      />
      <ApiErrorAlert error={clusters.error} />
      <Table<Cluster>
        data-testid="clusters-table"
        rowKey="name"
        loading={clusters.isLoading}
        dataSource={rows}
        pagination={{ pageSize: 50, hideOnSinglePage: true }}
        onRow={(c) => ({ onDoubleClick: () => navigate(`/clusters/${encodeURIComponent(c.name)}`) })}
        columns={[
          {
            title: t('clusters.name'),
            dataIndex: 'name',
            sorter: (a, b) => a.name.localeCompare(b.name),
            render: (name: string, c) => (
              <Link to={`/clusters/${encodeURIComponent(name)}`} data-testid={`cluster-link-${name}`}>
                {c.display_name ? `${c.display_name} (${name})` : name}
              </Link>
            ),
          },
          { title: t('clusters.category'), dataIndex: 'category', render: (v?: string) => v || '—' },
          { title: t('clusters.region'), dataIndex: 'region', render: (v?: string) => v || '—' },
          { title: t('clusters.runtime'), dataIndex: 'runtime', render: (v?: string) => v || '—' },
          { title: t('clusters.status'), dataIndex: 'online', render: (v: boolean) => <OnlineTag online={v} /> },
          {
            title: t('clusters.nodesOnline'),
            sorter: (a, b) => a.summary.nodes_online - b.summary.nodes_online,
            render: (_, c) => `${c.summary.nodes_online} / ${c.summary.nodes_total}`,
          },
          {
            title: t('clusters.onlineRate'),
            render: (_, c) => (
              <Progress percent={Math.round(c.summary.online_rate * 100)} size="small" style={{ width: 110, margin: 0 }} />
            ),
          },
          {
            title: t('clusters.gpusFree'),
            sorter: (a, b) => a.summary.gpus_free - b.summary.gpus_free,
            render: (_, c) => (
              <Tooltip title={t('clusters.gpuUse', { p: percent(c.summary.gpus_allocated, c.summary.gpus_allocatable) })}>
                <span data-testid={`cluster-gpus-${c.name}`}>
                  {c.summary.gpus_free} / {c.summary.gpus_allocatable}
                </span>
              </Tooltip>
            ),
          },
          {
            title: t('gpu.inUseTitle'),
            sorter: (a, b) => a.summary.gpus_allocated - b.summary.gpus_allocated,
            render: (_, c) => (
              <GpuInUse allocated={c.summary.gpus_allocated} foreign={c.summary.gpus_allocated_foreign} testId={`cluster-gpus-in-use-${c.name}`} />
            ),
          },
          { title: t('clusters.runningJobs'), render: (_, c) => c.summary.running_jobs, sorter: (a, b) => a.summary.running_jobs - b.summary.running_jobs },
          { title: t('clusters.lastSeen'), dataIndex: 'last_seen', render: formatTime },
        ]}
      />
    </>
  );
}
