/**
 * GPUs in use, the same words on every page (overview, cluster list, cluster, node, wizard): how many
 * are held now — by RLark's workers and by everything else on the nodes — and how many of those by
 * workloads RLark did not place. The numbers are the agents' reports, as the API serves them.
 */
import { Typography } from 'antd';
import { useTranslation } from 'react-i18next';

export function GpuInUse({ allocated, foreign, testId }: { allocated?: number; foreign?: number; testId?: string }) {
  const { t } = useTranslation();
  const held = allocated ?? 0;
  const others = foreign ?? 0;
  return (
    <Typography.Text type="secondary" data-testid={testId} className="nowrap">
      {others ? t('gpu.inUseOthers', { count: held, others }) : t('gpu.inUse', { count: held })}
    </Typography.Text>
  );
}
