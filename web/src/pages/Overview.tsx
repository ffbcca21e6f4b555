/** Overview: clusters online, nodes online, GPUs free/total, jobs by state, recent jobs. */
import { Card, Col, Progress, Row, Statistic, Table, Typography } from 'antd';
import { useQueries, useQuery } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { Link } from 'react-router-dom';
import { clustersApi, jobsApi } from '../api/endpoints';
import { clusterTotals } from '../api/normalize';
import { JOB_STATES, type Job } from '../api/types';
import ApiErrorAlert from '../components/ApiErrorAlert';
import { GpuInUse } from '../components/GpuUsage';
import PageTitle from '../components/PageTitle';
import { JobStatusTag, OnlineTag } from '../components/StatusTag';
import { formatTime, percent } from '../lib/format';

export default function Overview() {
  const { t } = useTranslation();
  const clusters = useQuery({ queryKey: ['clusters'], queryFn: clustersApi.list });
  const counts = useQueries({
    queries: JOB_STATES.map((status) => ({
      queryKey: ['job-counts', status],
      queryFn: async () => (await jobsApi.list({ status, page_size: 1 })).total,
    })),
  });
  const recent = useQuery({ queryKey: ['jobs', 'recent'], queryFn: () => jobsApi.list({ page_size: 8 }) });
  const items = clusters.data?.items ?? [];
  // Every cluster together, as the API sums them (the same numbers `rlark clusters list` prints).
  const totals = clusterTotals({ items, totals: clusters.data?.totals });

  return (
    <>
      <PageTitle title={t('overview.title')} sub={t('overview.sub')} />
      <ApiErrorAlert error={clusters.error} />
      <Row gutter={[16, 16]} className="stat-row">
        <Col span={6}>
          <Card data-testid="stat-clusters">
            <Statistic title={t('overview.clustersOnline')} value={totals.clusters_online} suffix={`/ ${totals.clusters}`} loading={clusters.isLoading} />
          </Card>
        </Col>
        <Col span={6}>
          <Card data-testid="stat-nodes">
            <Statistic title={t('overview.nodesOnline')} value={totals.nodes_online} suffix={`/ ${totals.nodes_total}`} loading={clusters.isLoading} />
            <Progress percent={percent(totals.nodes_online, totals.nodes_total)} size="small" />
          </Card>
        </Col>
        <Col span={6}>
          <Card data-testid="stat-gpus">
            <Statistic title={t('overview.gpusFree')} value={totals.gpus_free} suffix={`/ ${totals.gpus_allocatable}`} loading={clusters.isLoading} />
            <Progress
              percent={percent(totals.gpus_allocated, totals.gpus_allocatable)}
              size="small"
              format={(p) => t('overview.inUse', { p })}
            />
            <GpuInUse allocated={totals.gpus_allocated} foreign={totals.gpus_allocated_foreign} testId="overview-gpus-in-use" />
          </Card>
        </Col>
        <Col span={6}>
          <Card data-testid="stat-running">
            <Statistic
              title={t('overview.runningJobs')}
              value={counts[JOB_STATES.indexOf('Running')]?.data ?? 0}
              loading={counts.some((c) => c.isLoading)}
            />
          </Card>
        </Col>
      </Row>
      <Row gutter={[16, 16]} style={{ marginTop: 16 }}>
        <Col span={10}>
          <Card title={t('overview.jobsByState')} data-testid="jobs-by-state">
            <Row gutter={[8, 12]}>
              {JOB_STATES.map((status, i) => (
                <Col span={12} key={status}>
                  <Link to={`/jobs?status=${status}`} style={{ display: 'flex', justifyContent: 'space-between' }}>
                    <JobStatusTag status={status} />
                    <Typography.Text strong>{counts[i]?.data ?? '—'}</Typography.Text>
                  </Link>
                </Col>
              ))}
            </Row>
          </Card>
        </Col>
        <Col span={14}>
          <Card title={t('overview.clusters')} extra={<Link to="/clusters">{t('common.viewAll')}</Link>}>
            <Table
              size="small"
              rowKey="name"
              pagination={false}
              loading={clusters.isLoading}
              dataSource={items.slice(0, 8)}
              columns={[
                { title: t('clusters.name'), dataIndex: 'name', render: (name: string) => <Link to={`/clusters/${encodeURIComponent(name)}`}>{name}</Link> },
                { title: t('clusters.status'), dataIndex: 'online', render: (v: boolean) => <OnlineTag online={v} /> },
                { title: t('clusters.nodes'), render: (_, c) => `${c.summary.nodes_online} / ${c.summary.nodes_total}` },
                { title: t('clusters.gpus'), render: (_, c) => `${c.summary.gpus_free} / ${c.summary.gpus_allocatable}` },
                {
                  title: t('gpu.inUseTitle'),
                  render: (_, c) => <GpuInUse allocated={c.summary.gpus_allocated} foreign={c.summary.gpus_allocated_foreign} />,
                },
              ]}
            />
          </Card>
        </Col>
      </Row>
      <Card title={t('overview.recentJobs')} style={{ marginTop: 16 }} extra={<Link to="/jobs">{t('common.viewAll')}</Link>}>
        <Table<Job>
          size="small"
          rowKey="id"
          pagination={false}
          loading={recent.isLoading}
          dataSource={recent.data?.items ?? []}
          columns={[
            { title: t('jobs.name'), dataIndex: 'name', render: (name: string, job) => <Link to={`/jobs/${encodeURIComponent(job.id)}`}>{name}</Link> },
            { title: t('jobs.status'), dataIndex: 'status', render: (s: string) => <JobStatusTag status={s} /> },
            { title: t('jobs.owner'), dataIndex: 'owner' },
            { title: t('jobs.submittedAt'), dataIndex: 'created_at', render: formatTime },
          ]}
        />
      </Card>
    </>
  );
}
