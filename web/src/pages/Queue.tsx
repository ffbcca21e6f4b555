/**
 * The queue that explains itself (issue 20): every waiting job in the order rounds try them — others' jobs
 * unnamed — and, for each of yours, the jobs ahead in its clusters, its estimated start and what would make it
 * fit now (GET /queue, GET /queue/{id}; the server's sentences in the console's language, ADR 0011).
 */
import { Alert, Card, Descriptions, Space, Switch, Table, Tag, Typography } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link } from 'react-router-dom';
import { queueApi } from '../api/endpoints';
import type { QueuedJob } from '../api/types';
import ApiErrorAlert from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { serverText } from '../i18n/server';
import { formatTime } from '../lib/format';

const WAITS_COLORS: Record<string, string> = { capacity: 'processing', quota: 'warning', hold: 'default' };

/** Where one of your waiting jobs stands: estimated start, its basis, hints, jobs ahead. */
export function QueueExplanation({ jobId }: { jobId: string }) {
  const { t, i18n } = useTranslation();
  const detail = useQuery({ queryKey: ['queue', jobId], queryFn: () => queueApi.explain(jobId), refetchInterval: 10_000 });
  if (detail.error) return <ApiErrorAlert error={detail.error} />;
  const d = detail.data;
  if (!d) return <Typography.Text type="secondary">{t('queue.loading')}</Typography.Text>;
  return (
    <Space orientation="vertical" size="small" style={{ width: '100%' }} data-testid={`queue-explanation-${jobId}`}>
      <Descriptions size="small" column={1} bordered>
        <Descriptions.Item label={t('queue.estimatedStart')}>
          <span data-testid="queue-estimate">{d.estimated_start ? formatTime(d.estimated_start) : t('queue.unknown')}</span>
          <Typography.Text type="secondary" style={{ display: 'block', fontSize: 12 }}>
            {serverText(i18n.language, { message: d.estimate_basis, ...d.estimate_basis_said })}
          </Typography.Text>
        </Descriptions.Item>
        <Descriptions.Item label={t('queue.jobsAhead')}>{d.jobs_ahead.length}</Descriptions.Item>
      </Descriptions>
      {d.hints.length > 0 && (
        <Alert
          type="info"
          showIcon
          title={t('queue.fitsNowIf')}
          description={
            <ul className="plain-list" data-testid="queue-hints">
              {d.hints.map((h, i) => (
                <li key={i}>{serverText(i18n.language, h)}</li>
              ))}
            </ul>
          }
        />
      )}
    </Space>
  );
}

export default function Queue() {
  const { t } = useTranslation();
  const [mine, setMine] = useState(false);
  const queue = useQuery({ queryKey: ['queue', { mine }], queryFn: () => queueApi.list(mine), refetchInterval: 10_000 });
  const items = queue.data?.items ?? [];
  return (
    <>
      <PageTitle title={t('queue.title')} sub={t('queue.sub')} />
      <Card
        title={t('queue.waiting', { count: queue.data?.total ?? 0 })}
        extra={
          <Space>
            <span>{t('queue.onlyMine')}</span>
            <Switch checked={mine} onChange={setMine} data-testid="queue-mine" />
          </Space>
        }
      >
        <ApiErrorAlert error={queue.error} />
        <Table<QueuedJob>
          data-testid="queue-table"
          rowKey={(j) => String(j.position)}
          loading={queue.isLoading}
          dataSource={items}
          locale={{ emptyText: t('queue.empty') }}
          pagination={{ hideOnSinglePage: true, pageSize: 50 }}
          expandable={{
            rowExpandable: (j) => Boolean(j.job_id),
            expandedRowRender: (j) => (j.job_id ? <QueueExplanation jobId={j.job_id} /> : null),
            columnTitle: t('queue.explain'),
          }}
          columns={[
            { title: '#', dataIndex: 'position', width: 56 },
            {
              title: t('queue.job'),
              render: (_, j) =>
                j.job_id ? (
                  <Space orientation="vertical" size={0}>
                    <Link to={`/jobs/${j.job_id}`}>{j.name}</Link>
                    {j.owner && !j.mine && <Typography.Text type="secondary">{j.owner}</Typography.Text>}
                  </Space>
                ) : (
                  <Typography.Text type="secondary">{t('queue.othersJob')}</Typography.Text>
                ),
            },
            { title: t('queue.project'), dataIndex: 'project', render: (v: string | null) => v ?? '—' },
            { title: t('queue.priority'), dataIndex: 'priority' },
            { title: t('queue.gpus'), dataIndex: 'gpus' },
            { title: t('queue.clusters'), dataIndex: 'clusters', render: (v: string[]) => v.map((c) => <Tag key={c}>{c}</Tag>) },
            { title: t('queue.ahead'), dataIndex: 'ahead' },
            {
              title: t('queue.waitsFor'),
              dataIndex: 'waits_for',
              render: (v: string) => <Tag color={WAITS_COLORS[v] ?? 'default'}>{t(`queue.waits.${v}`, { defaultValue: v })}</Tag>,
            },
            { title: t('queue.since'), dataIndex: 'waiting_since', render: formatTime },
          ]}
        />
      </Card>
    </>
  );
}
