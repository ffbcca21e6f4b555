/**
 * The job page's Usage tab (issue 19 item 1, ADR 0017): each worker's CPU cores, memory and GPU use over a
 * chosen range, as sampled by its cluster's agent — every attempt's workers, newest samples last. Refreshed
 * every 30 s while the job runs.
 */
import { Alert, Segmented, Space, Table, Typography } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { jobsApi } from '../../api/endpoints';
import type { UsagePoint, WorkerUsageSeries } from '../../api/types';
import ApiErrorAlert from '../../components/ApiErrorAlert';
import Sparkline from '../../components/Sparkline';
import { formatBytes } from '../../lib/format';

const RANGES = [
  { since: 3600, step: 60 },
  { since: 6 * 3600, step: 300 },
  { since: 24 * 3600, step: 900 },
] as const;

function latest(points: UsagePoint[]): UsagePoint | undefined {
  return points[points.length - 1];
}

export default function UsageTab({ jobId, active }: { jobId: string; active: boolean }) {
  const { t } = useTranslation();
  const [range, setRange] = useState(0);
  const { since, step } = RANGES[range];
  const usage = useQuery({
    queryKey: ['job-usage', jobId, since, step],
    queryFn: () => jobsApi.usage(jobId, since, step),
    refetchInterval: active ? 30_000 : false,
  });
  const workers = usage.data?.workers ?? [];
  return (
    <Space orientation="vertical" style={{ width: '100%' }} data-testid="usage-tab">
      <Space wrap>
        <Segmented
          data-testid="usage-range"
          value={range}
          onChange={(value) => setRange(Number(value))}
          options={RANGES.map((r, i) => ({ value: i, label: t('usage.range', { hours: r.since / 3600 }) }))}
        />
        <Typography.Text type="secondary">{t('usage.sampled', { seconds: step })}</Typography.Text>
      </Space>
      {usage.error && <ApiErrorAlert error={usage.error} />}
      {!usage.isLoading && !usage.error && workers.length === 0 && (
        <Alert type="info" showIcon title={t('usage.none')} data-testid="usage-empty" />
      )}
      {workers.length > 0 && (
        <Table<WorkerUsageSeries>
          data-testid="usage-table"
          size="small"
          rowKey={(w) => w.worker_id}
          dataSource={workers}
          pagination={false}
          columns={[
            {
              key: 'worker',
              title: t('usage.worker'),
              render: (_, w) => (
                <span className="mono">
                  {w.role}-{w.index}
                  {w.attempt > 1 ? ` · ${t('usage.attempt', { attempt: w.attempt })}` : ''}
                </span>
              ),
            },
            {
              key: 'cpu',
              title: t('usage.cpu'),
              render: (_, w) => (
                <Space>
                  <Sparkline label={t('usage.cpu')} testId={`usage-cpu-${w.worker_id}`} values={w.points.map((p) => p.cpu_cores_used)} />
                  <span>{latest(w.points)?.cpu_cores_used.toFixed(2) ?? '—'}</span>
                </Space>
              ),
            },
            {
              key: 'memory',
              title: t('usage.memory'),
              render: (_, w) => (
                <Space>
                  <Sparkline label={t('usage.memory')} values={w.points.map((p) => p.memory_bytes)} />
                  <span>{formatBytes(latest(w.points)?.memory_bytes)}</span>
                </Space>
              ),
            },
            {
              key: 'gpu',
              title: t('usage.gpu'),
              render: (_, w) => {
                const last = latest(w.points);
                if (!last || last.gpu_count === 0 || last.gpu_util_pct === null) return <span>{t('usage.noGpus')}</span>;
                return (
                  <Space>
                    <Sparkline label={t('usage.gpu')} testId={`usage-gpu-${w.worker_id}`} max={100} values={w.points.map((p) => p.gpu_util_pct)} />
                    <span>
                      {t('usage.gpuNow', { n: last.gpu_count, pct: Math.round(last.gpu_util_pct) })} ·{' '}
                      {formatBytes(last.gpu_memory_used_bytes)} / {formatBytes(last.gpu_memory_total_bytes)}
                    </span>
                  </Space>
                );
              },
            },
          ]}
        />
      )}
    </Space>
  );
}
