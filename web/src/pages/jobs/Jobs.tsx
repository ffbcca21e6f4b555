/** Job list with filters (state, text, owner) kept in the URL so a filtered list can be shared. */
import { Button, Input, Select, Space, Table, Tag, Tooltip } from 'antd';
import { CodeOutlined, PlusOutlined } from '@ant-design/icons';
import { useQuery } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { Link, useNavigate, useSearchParams } from 'react-router-dom';
import { jobsApi } from '../../api/endpoints';
import { JOB_STATES, type Job, type JobQuery, type JobStatus } from '../../api/types';
import ApiErrorAlert from '../../components/ApiErrorAlert';
import { useServerText } from '../../i18n/server';
import PageTitle from '../../components/PageTitle';
import { JobStatusTag } from '../../components/StatusTag';
import { formatTime } from '../../lib/format';

export default function Jobs() {
  const { t } = useTranslation();
  const { sayReason } = useServerText();
  const navigate = useNavigate();
  const [params, setParams] = useSearchParams();
  const query: JobQuery = {
    status: (params.get('status') as JobStatus | null) ?? undefined,
    q: params.get('q') ?? undefined,
    owner: params.get('owner') ?? undefined,
    page: Number(params.get('page') ?? 1),
    page_size: Number(params.get('page_size') ?? 20),
  };
  const jobs = useQuery({ queryKey: ['jobs', query], queryFn: () => jobsApi.list(query), placeholderData: (prev) => prev });
  const update = (changes: Record<string, string | undefined>) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(changes)) {
      if (v) next.set(k, v);
      else next.delete(k);
    }
    if (!('page' in changes)) next.delete('page');
    setParams(next);
  };
  return (
    <>
      <PageTitle
        title={t('jobs.title')}
        sub={t('jobs.sub')}
        extra={
          <>
            <Button icon={<CodeOutlined />} onClick={() => navigate('/jobs/new/yaml')} data-testid="submit-yaml">
              {t('jobs.submitYaml')}
            </Button>
            <Button type="primary" icon={<PlusOutlined />} onClick={() => navigate('/jobs/new')} data-testid="create-job">
              {t('jobs.create')}
            </Button>
          </>
        }
      />
      <Space wrap style={{ marginBottom: 12 }}>
        <Select
          allowClear
          aria-label={t('jobs.status')}
          placeholder={t('jobs.anyStatus')}
          style={{ width: 180 }}
          value={query.status}
          onChange={(v?: string) => update({ status: v })}
          options={JOB_STATES.map((s) => ({ value: s, label: t(`jobStatus.${s}`) }))}
          data-testid="job-status-filter"
        />
        <Input.Search
          allowClear
          aria-label={t('jobs.search')}
          placeholder={t('jobs.search')}
          defaultValue={query.q}
          onSearch={(v) => update({ q: v || undefined })}
          style={{ width: 280 }}
          data-testid="job-search"
        />
        <Input.Search
          allowClear
          aria-label={t('jobs.owner')}
          placeholder={t('jobs.ownerFilter')}
          defaultValue={query.owner}
          onSearch={(v) => update({ owner: v || undefined })}
          style={{ width: 200 }}
        />
      </Space>
      <ApiErrorAlert error={jobs.error} />
      <Table<Job>
        data-testid="jobs-table"
        rowKey="id"
        loading={jobs.isLoading}
        dataSource={jobs.data?.items ?? []}
        pagination={{
          current: query.page,
          pageSize: query.page_size,
          total: jobs.data?.total ?? 0,
          showSizeChanger: true,
          showTotal: (n) => t('common.total', { count: n }),
          onChange: (page, pageSize) => update({ page: String(page), page_size: String(pageSize) }),
        }}
        columns={[
          {
            title: t('jobs.name'),
            dataIndex: 'name',
            render: (name: string, job) => (
              <Link to={`/jobs/${encodeURIComponent(job.id)}`} data-testid={`job-link-${job.id}`}>
                {name}
              </Link>
            ),
          },
          { title: t('jobs.id'), dataIndex: 'id', width: 160, render: (v: string) => <span className="mono nowrap">{v}</span> },
          { title: t('jobs.status'), dataIndex: 'status', render: (s: string) => <JobStatusTag status={s} /> },
          {
            title: t('jobs.reason'),
            dataIndex: 'reason',
            width: '28%',
            ellipsis: { showTitle: false },
            render: (_: string | undefined, job: Job) => {
              const v = sayReason(job);
              return v ? <Tooltip title={v} placement="topLeft">{v}</Tooltip> : '—';
            },
          },
          { title: t('jobs.owner'), dataIndex: 'owner' },
          {
            title: t('jobs.clusters'),
            dataIndex: 'clusters',
            render: (v?: string[]) => (v?.length ? <Space size={4} wrap>{v.map((c) => <Tag key={c}>{c}</Tag>)}</Space> : '—'),
          },
          { title: t('jobs.workers'), render: (_, job) => (job.worker_count === undefined ? '—' : `${job.worker_count} · ${t('jobDetail.gpus', { count: job.gpu_count ?? 0 })}`) },
          { title: t('jobs.submittedAt'), dataIndex: 'created_at', width: 180, render: (v?: string) => <span className="nowrap">{formatTime(v)}</span> },
        ]}
      />
    </>
  );
}
