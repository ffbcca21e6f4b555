/**
 * A cluster's hostPath policy: the host directories its workers may mount (ADR 0006). Everyone sees
 * the allow-list — it explains why a job's hostPath was refused; admins edit it (one prefix per line).
 * The server normalises the list and refuses protected paths, naming the entry; nothing changes then.
 */
import { App, Button, Card, Input, Space, Tag, Typography } from 'antd';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { clustersApi } from '../api/endpoints';
import ApiErrorAlert from './ApiErrorAlert';

export function prefixesOf(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
}

export default function HostPathPolicy({ cluster, editable }: { cluster: string; editable: boolean }) {
  const { t } = useTranslation();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [draft, setDraft] = useState<string | null>(null);
  const policy = useQuery({ queryKey: ['hostpath-policy', cluster], queryFn: () => clustersApi.hostPathPolicy(cluster) });
  const save = useMutation({
    mutationFn: (allow: string[]) => clustersApi.setHostPathPolicy(cluster, allow),
    onSuccess: (saved) => {
      client.setQueryData(['hostpath-policy', cluster], saved);
      void client.invalidateQueries({ queryKey: ['cluster', cluster] });
      setDraft(null);
      void message.success(t('hostPaths.saved'));
    },
  });
  const allow = policy.data?.allow ?? [];

  return (
    <Card
      title={t('hostPaths.title')}
      size="small"
      style={{ marginTop: 16 }}
      data-testid="hostpath-policy"
      extra={
        editable &&
        draft === null && (
          <Button size="small" onClick={() => setDraft(allow.join('\n'))} data-testid="hostpath-edit">
            {t('common.edit')}
          </Button>
        )
      }
    >
      <Typography.Paragraph type="secondary" style={{ marginBottom: 8 }}>
        {t('hostPaths.hint')}
      </Typography.Paragraph>
      <ApiErrorAlert error={policy.error ?? save.error} />
      {draft === null ? (
        allow.length === 0 ? (
          <Typography.Text type="secondary" data-testid="hostpath-none">
            {t('hostPaths.none')}
          </Typography.Text>
        ) : (
          <Space wrap>
            {allow.map((prefix) => (
              <Tag key={prefix} className="mono">
                {prefix}
              </Tag>
            ))}
          </Space>
        )
      ) : (
        <Space orientation="vertical" style={{ width: '100%' }}>
          <Input.TextArea
            rows={4}
            className="mono"
            value={draft}
            placeholder={t('hostPaths.placeholder')}
            onChange={(event) => setDraft(event.target.value)}
            aria-label={t('hostPaths.title')}
            data-testid="hostpath-input"
          />
          <Space>
            <Button type="primary" loading={save.isPending} onClick={() => save.mutate(prefixesOf(draft))} data-testid="hostpath-save">
              {t('common.save')}
            </Button>
            <Button onClick={() => { setDraft(null); save.reset(); }}>{t('common.cancel')}</Button>
          </Space>
        </Space>
      )}
    </Card>
  );
}
