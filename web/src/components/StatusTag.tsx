/** Coloured tags for job, worker and node states, with translated texts. */
import { Tag } from 'antd';
import { useTranslation } from 'react-i18next';
import type { NodeStatus } from '../api/types';

const JOB_COLORS: Record<string, string> = {
  Pending: 'gold',
  Scheduled: 'cyan',
  Starting: 'blue',
  Running: 'processing',
  Succeeded: 'success',
  Failed: 'error',
  Cancelled: 'default',
  Lost: 'magenta',
};

export function JobStatusTag({ status }: { status: string }) {
  const { t } = useTranslation();
  return (
    <Tag color={JOB_COLORS[status] ?? 'default'} data-testid="job-status">
      {t(`jobStatus.${status}`, { defaultValue: status })}
    </Tag>
  );
}

const NODE_COLORS: Record<NodeStatus, string> = {
  ready: 'success',
  not_ready: 'error',
  cordoned: 'warning',
  gone: 'default',
};

export function NodeStatusTag({ status }: { status: NodeStatus }) {
  const { t } = useTranslation();
  return <Tag color={NODE_COLORS[status] ?? 'default'}>{t(`nodeStatus.${status}`)}</Tag>;
}

const PHASE_COLORS: Record<string, string> = {
  pending: 'gold',
  created: 'cyan',
  image_pulling: 'blue',
  preparing: 'blue',
  running: 'processing',
  ray_joined: 'processing',
  succeeded: 'success',
  exited: 'default',
  failed: 'error',
  stopped: 'default',
  lost: 'magenta',
};

export function PhaseTag({ phase }: { phase: string }) {
  const { t } = useTranslation();
  const key = phase.toLowerCase();
  return <Tag color={PHASE_COLORS[key] ?? 'default'}>{t(`workerPhase.${key}`, { defaultValue: phase })}</Tag>;
}

export function OnlineTag({ online }: { online: boolean }) {
  const { t } = useTranslation();
  return <Tag color={online ? 'success' : 'error'}>{online ? t('common.online') : t('common.offline')}</Tag>;
}
