/** Personal API tokens for the CLI and scripts (`Authorization: Bearer`); a new token is shown once. */
import { Alert, App, Button, Card, Form, Input, Modal, Popconfirm, Space, Table, Typography } from 'antd';
import { PlusOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { authApi } from '../api/endpoints';
import type { ApiToken } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { formatTime } from '../lib/format';

export default function Tokens() {
  const { t } = useTranslation();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [form] = Form.useForm<{ name: string }>();
  const [created, setCreated] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const tokens = useQuery({ queryKey: ['tokens'], queryFn: authApi.tokens });
  const create = useMutation({
    mutationFn: (name: string) => authApi.createToken(name),
    onSuccess: (token) => {
      setCreated(token.token);
      setError(null);
      form.resetFields();
      void client.invalidateQueries({ queryKey: ['tokens'] });
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['name']);
    },
  });
  const remove = useMutation({
    mutationFn: authApi.deleteToken,
    onSuccess: () => void client.invalidateQueries({ queryKey: ['tokens'] }),
    onError: (err) => void message.error(errorMessage(err)),
  });
  return (
    <>
      <PageTitle title={t('tokens.title')} sub={t('tokens.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <Card title={t('tokens.createTitle')}>
          <ApiErrorAlert error={error} />
          <Form form={form} layout="inline" onFinish={(v) => create.mutate(v.name.trim())}>
            <Form.Item name="name" label={t('tokens.name')} rules={[{ required: true, message: t('tokens.nameRequired') }]}>
              <Input placeholder="laptop-cli" data-testid="token-name" autoComplete="off" style={{ width: 260 }} />
            </Form.Item>
            <Button type="primary" htmlType="submit" icon={<PlusOutlined />} loading={create.isPending} data-testid="token-submit">
              {t('tokens.create')}
            </Button>
          </Form>
        </Card>
        <Card title={t('tokens.listTitle')}>
          <ApiErrorAlert error={tokens.error} />
          <Table<ApiToken>
            data-testid="tokens-table"
            size="small"
            rowKey="id"
            loading={tokens.isLoading}
            dataSource={tokens.data?.items ?? []}
            pagination={{ hideOnSinglePage: true }}
            columns={[
              { title: t('tokens.name'), dataIndex: 'name' },
              { title: t('keys.createdAt'), dataIndex: 'created_at', render: formatTime },
              { title: t('tokens.lastUsed'), dataIndex: 'last_used_at', render: formatTime },
              {
                title: t('common.actions'),
                render: (_, token) => (
                  <Popconfirm title={t('tokens.deleteConfirm', { name: token.name })} onConfirm={() => remove.mutate(token.id)} okButtonProps={{ danger: true }}>
                    <Button size="small" danger>{t('common.delete')}</Button>
                  </Popconfirm>
                ),
              },
            ]}
          />
        </Card>
      </Space>
      <Modal
        open={Boolean(created)}
        title={t('tokens.createdTitle')}
        onCancel={() => setCreated(null)}
        mask={{ closable: false }}
        destroyOnHidden
        footer={<Button type="primary" onClick={() => setCreated(null)}>{t('credential.done')}</Button>}
      >
        <Space orientation="vertical" style={{ width: '100%' }}>
          <Alert type="warning" showIcon title={t('tokens.warning')} />
          <Typography.Paragraph copyable={{ text: created ?? '' }} code data-testid="api-token" style={{ wordBreak: 'break-all' }}>
            {created}
          </Typography.Paragraph>
        </Space>
      </Modal>
    </>
  );
}
