/**
 * A worker's log: the stored lines (`GET /jobs/{id}/logs?worker=`), or a live tail over SSE with
 * `follow=true`. Logs are kept by the platform after the worker's pod is gone, so this works for
 * finished jobs too. Download saves the stored text. ANSI colours show as colours; other escape
 * sequences are dropped.
 */
import { Button, Empty, Select, Space, Switch, Typography } from 'antd';
import { DownloadOutlined, ReloadOutlined } from '@ant-design/icons';
import { useQuery } from '@tanstack/react-query';
import { Fragment, useEffect, useRef, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { jobsApi } from '../../api/endpoints';
import type { Worker } from '../../api/types';
import ApiErrorAlert from '../../components/ApiErrorAlert';
import { ansiRuns } from '../../lib/ansi';

const MAX_LINES = 5000;

/** The worker bootstrap's lines for the platform (`##rlark {...}`): hidden unless asked for. */
export const MARKER_PREFIX = '##rlark ';

/** Lines carried by one SSE message: JSON `{line}` / `{lines: [...]}` or plain text. */
export function linesOf(data: string): string[] {
  try {
    const parsed = JSON.parse(data) as { line?: string; lines?: string[] } | string;
    if (typeof parsed === 'string') return [parsed];
    if (Array.isArray(parsed?.lines)) return parsed.lines.map(String);
    if (typeof parsed?.line === 'string') return [parsed.line];
  } catch {
    // plain text line
  }
  return data.split('\n');
}

/** Stored logs come as text, or as JSON lines with a `line` field each. */
export function textLines(text: string): string[] {
  if (!text) return [];
  return text
    .replace(/\n$/, '')
    .split('\n')
    .map((row) => {
      if (!row.startsWith('{')) return row;
      try {
        const parsed = JSON.parse(row) as { line?: string };
        return typeof parsed.line === 'string' ? parsed.line : row;
      } catch {
        return row;
      }
    });
}

export default function LogViewer({ jobId, workers, active }: { jobId: string; workers: Worker[]; active: boolean }) {
  const { t } = useTranslation();
  const [worker, setWorker] = useState<string>(workers[0]?.worker_id ?? '');
  const [follow, setFollow] = useState(active);
  const [markers, setMarkers] = useState(false);
  const [live, setLive] = useState<string[]>([]);
  const view = useRef<HTMLPreElement>(null);
  useEffect(() => {
    if (!worker && workers[0]) setWorker(workers[0].worker_id);
  }, [workers, worker]);
  const stored = useQuery({
    queryKey: ['logs', jobId, worker],
    queryFn: () => jobsApi.logs(jobId, worker),
    enabled: Boolean(worker) && !follow,
  });
  useEffect(() => {
    if (!follow || !worker || typeof EventSource === 'undefined') return undefined;
    setLive([]);
    const source = new EventSource(jobsApi.logsUrl(jobId, worker, true), { withCredentials: true });
    const onData = (event: MessageEvent) =>
      setLive((prev) => {
        const next = prev.concat(linesOf(String(event.data)));
        return next.length > MAX_LINES ? next.slice(next.length - MAX_LINES) : next;
      });
    source.onmessage = onData;
    source.addEventListener('log', onData as EventListener);
    // The job ended: nothing more will come, and EventSource would otherwise reconnect.
    source.addEventListener('end', () => source.close());
    return () => source.close();
  }, [follow, worker, jobId]);
  const all = follow ? live : textLines(stored.data ?? '');
  const lines = markers ? all : all.filter((line) => !line.startsWith(MARKER_PREFIX));
  useEffect(() => {
    if (follow && view.current) view.current.scrollTop = view.current.scrollHeight;
  }, [lines.length, follow]);

  if (!workers.length) return <Empty description={t('logs.noWorkers')} />;
  const current = workers.find((w) => w.worker_id === worker);
  return (
    <Space orientation="vertical" style={{ width: '100%' }}>
      <Space wrap>
        <Select
          aria-label={t('logs.worker')}
          data-testid="log-worker"
          style={{ width: 320 }}
          value={worker}
          onChange={setWorker}
          options={workers.map((w) => ({ value: w.worker_id, label: `${w.role}-${w.index} · ${w.node ?? '—'} (${w.worker_id})` }))}
        />
        <Space>
          <Switch checked={follow} onChange={setFollow} aria-label={t('logs.follow')} data-testid="log-follow" />
          <span>{t('logs.follow')}</span>
        </Space>
        <Space>
          <Switch checked={markers} onChange={setMarkers} aria-label={t('logs.markers')} data-testid="log-markers" />
          <span>{t('logs.markers')}</span>
        </Space>
        {!follow && (
          <Button icon={<ReloadOutlined />} onClick={() => void stored.refetch()} aria-label={t('common.refresh')}>
            {t('common.refresh')}
          </Button>
        )}
        <Button icon={<DownloadOutlined />} href={jobsApi.logsUrl(jobId, worker)} download={`${jobId}-${current?.role ?? 'worker'}-${current?.index ?? 0}.log`} data-testid="log-download">
          {t('logs.download')}
        </Button>
        <Typography.Text type="secondary">{t('logs.lines', { count: lines.length })}</Typography.Text>
      </Space>
      <ApiErrorAlert error={stored.error} />
      <pre className="log-view" ref={view} data-testid="log-view" tabIndex={0} aria-label={t('logs.title')}>
        {lines.map((line, i) => (
          <Fragment key={i}>
            {i > 0 && '\n'}
            {ansiRuns(line).map((run, j) => (run.style ? <span key={j} style={run.style}>{run.text}</span> : <Fragment key={j}>{run.text}</Fragment>))}
          </Fragment>
        ))}
      </pre>
    </Space>
  );
}
