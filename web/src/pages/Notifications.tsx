/**
 * Notifications (issue 19 item 3): webhooks that hear about your jobs' state changes — Feishu, DingTalk,
 * Slack, or signed JSON — with filters by state and job, a test button and each endpoint's delivery log.
 * A signing secret goes to the server once and never comes back: the list says only whether one is set.
 */
import { App, Button, Card, Form, Input, Popconfirm, Select, Space, Switch, Table, Tag, Typography } from 'antd';
import { PlusOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { notifyApi } from '../api/endpoints';
import type { Delivery, DeliveryAttempt, EndpointKind, NotifyEndpoint, NotifyEndpointCreate } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { JobStatusTag } from '../components/StatusTag';
import { useSession } from '../auth';
import { formatTime } from '../lib/format';

const KINDS: EndpointKind[] = ['feishu', 'dingtalk', 'slack', 'json'];
const STATES = ['Pending', 'Scheduled', 'Starting', 'Running', 'Succeeded', 'Failed', 'Cancelled', 'Lost'];
const FIELDS = ['name', 'kind', 'url', 'secret', 'scope', 'states', 'job_ids', 'language'] as const;
const DELIVERY_COLORS: Record<Delivery['status'], string> = { pending: 'processing', delivered: 'success', failed: 'error' };

interface FormValues {
  name: string;
  kind: EndpointKind;
  url: string;
  secret?: string;
  states?: string[];
  job_ids?: string[];
  all_users?: boolean;
  language: 'en' | 'zh-CN';
}

export function AddEndpointForm() {
  const { t, i18n } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const [form] = Form.useForm<FormValues>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const add = useMutation({
    mutationFn: notifyApi.create,
    onSuccess: (endpoint) => {
      form.resetFields();
      setError(null);
      void client.invalidateQueries({ queryKey: ['notify'] });
      void message.success(t('notify.added', { name: endpoint.name }));
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, FIELDS);
    },
  });
  const submit = (values: FormValues) => {
    const body: NotifyEndpointCreate = {
      name: values.name.trim(),
      kind: values.kind,
      url: values.url.trim(),
      scope: values.all_users ? 'all' : 'own',
      states: values.states ?? [],
      job_ids: (values.job_ids ?? []).map((id) => id.trim()).filter(Boolean),
      language: values.language,
    };
    if (values.secret) body.secret = values.secret;
    add.mutate(body);
  };
  return (
    <Form
      form={form}
      layout="vertical"
      onFinish={submit}
      data-testid="notify-form"
      requiredMark="optional"
      initialValues={{ kind: 'feishu', language: i18n.language === 'en' ? 'en' : 'zh-CN' }}
    >
      <ApiErrorAlert error={error} className="form-alert" />
      <Space wrap align="start" size="middle">
        <Form.Item name="name" label={t('notify.name')} rules={[{ required: true, message: t('notify.nameRequired') }]}>
          <Input placeholder="team-chat" data-testid="notify-name" autoComplete="off" style={{ width: 220 }} />
        </Form.Item>
        <Form.Item name="kind" label={t('notify.kind')}>
          <Select
            data-testid="notify-kind"
            style={{ width: 180 }}
            options={KINDS.map((kind) => ({ value: kind, label: t(`notify.kinds.${kind}`) }))}
          />
        </Form.Item>
        <Form.Item name="language" label={t('notify.language')}>
          <Select style={{ width: 140 }} options={[{ value: 'zh-CN', label: '中文' }, { value: 'en', label: 'English' }]} />
        </Form.Item>
      </Space>
      <Form.Item name="url" label={t('notify.url')} extra={t('notify.urlHint')} rules={[{ required: true, message: t('notify.urlRequired') }]}>
        <Input placeholder="https://open.feishu.cn/open-apis/bot/v2/hook/…" data-testid="notify-url" autoComplete="off" />
      </Form.Item>
      <Form.Item name="secret" label={t('notify.secret')} extra={t('notify.secretHint')}>
        <Input.Password data-testid="notify-secret" autoComplete="new-password" />
      </Form.Item>
      <Space wrap align="start" size="middle">
        <Form.Item name="states" label={t('notify.states')} extra={t('notify.statesHint')}>
          <Select
            mode="multiple"
            data-testid="notify-states"
            style={{ minWidth: 320 }}
            options={STATES.map((state) => ({ value: state, label: t(`jobStatus.${state}`, { defaultValue: state }) }))}
          />
        </Form.Item>
        <Form.Item name="job_ids" label={t('notify.jobs')} extra={t('notify.jobsHint')}>
          <Select mode="tags" data-testid="notify-jobs" style={{ minWidth: 320 }} open={false} />
        </Form.Item>
        {isAdmin && (
          <Form.Item name="all_users" label={t('notify.allUsersJobs')} valuePropName="checked">
            <Switch data-testid="notify-all-users" />
          </Form.Item>
        )}
      </Space>
      <Button type="primary" htmlType="submit" icon={<PlusOutlined />} loading={add.isPending} data-testid="notify-submit">
        {t('notify.add')}
      </Button>
    </Form>
  );
}

function AttemptsList({ attempts }: { attempts: DeliveryAttempt[] }) {
  const { t } = useTranslation();
  return (
    <ul className="plain-list" data-testid="delivery-attempts">
      {attempts.map((a) => (
        <li key={a.attempt}>
          {t('notify.attemptLine', {
            attempt: a.attempt,
            at: formatTime(a.at),
            code: a.status_code ?? '—',
            ms: a.duration_ms,
          })}
          {a.error && <Typography.Text type="danger"> {a.error}</Typography.Text>}
        </li>
      ))}
    </ul>
  );
}

function DeliveryLog({ endpoint }: { endpoint: NotifyEndpoint }) {
  const { t } = useTranslation();
  const log = useQuery({ queryKey: ['notify', 'deliveries', endpoint.id], queryFn: () => notifyApi.deliveries(endpoint.id), refetchInterval: 5000 });
  return (
    <Card title={t('notify.logTitle', { name: endpoint.name })} data-testid="delivery-log">
      <ApiErrorAlert error={log.error} />
      <Table<Delivery>
        rowKey="id"
        size="small"
        loading={log.isLoading}
        dataSource={log.data?.items ?? []}
        pagination={{ hideOnSinglePage: true, pageSize: 50 }}
        expandable={{ expandedRowRender: (d) => <AttemptsList attempts={d.log} />, rowExpandable: (d) => d.log.length > 0 }}
        columns={[
          { title: t('notify.createdAt'), dataIndex: 'created_at', render: formatTime },
          { title: t('notify.job'), dataIndex: 'job_id', render: (v: string) => <span className="mono">{v}</span> },
          { title: t('notify.state'), dataIndex: 'to_status', render: (v: string) => (v === 'Test' ? <Tag>{t('notify.testEvent')}</Tag> : <JobStatusTag status={v} />) },
          {
            title: t('notify.status'),
            dataIndex: 'status',
            render: (v: Delivery['status']) => <Tag color={DELIVERY_COLORS[v]} data-testid="delivery-status">{t(`notify.deliveryStatus.${v}`)}</Tag>,
          },
          { title: t('notify.attempts'), dataIndex: 'attempts' },
          { title: t('notify.lastCode'), dataIndex: 'last_status_code', render: (v: number | null) => v ?? '—' },
          { title: t('notify.lastError'), dataIndex: 'last_error', render: (v: string) => v || '—' },
        ]}
      />
    </Card>
  );
}

export default function Notifications() {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [all, setAll] = useState(false);
  const [selected, setSelected] = useState<NotifyEndpoint | null>(null);
  const endpoints = useQuery({ queryKey: ['notify', 'endpoints', all], queryFn: () => notifyApi.list(all) });
  const remove = useMutation({
    mutationFn: (endpoint: NotifyEndpoint) => notifyApi.remove(endpoint.id),
    onSuccess: (_, endpoint) => {
      if (selected?.id === endpoint.id) setSelected(null);
      void client.invalidateQueries({ queryKey: ['notify'] });
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  const test = useMutation({
    mutationFn: (endpoint: NotifyEndpoint) => notifyApi.test(endpoint.id),
    onSuccess: (_, endpoint) => {
      setSelected(endpoint);
      void message.success(t('notify.testQueued', { name: endpoint.name }));
      void client.invalidateQueries({ queryKey: ['notify', 'deliveries', endpoint.id] });
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  const filters = (e: NotifyEndpoint) => (
    <Space size={[4, 4]} wrap>
      {e.states.length ? e.states.map((s) => <JobStatusTag key={s} status={s} />) : <Tag>{t('notify.allStates')}</Tag>}
      {e.job_ids.length ? e.job_ids.map((id) => <Tag key={id} className="mono">{id}</Tag>) : <Tag>{e.scope === 'all' ? t('notify.everyJob') : t('notify.myJobs')}</Tag>}
    </Space>
  );
  return (
    <>
      <PageTitle title={t('notify.title')} sub={t('notify.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <Card title={t('notify.addTitle')}>
          <Typography.Paragraph type="secondary">{t('notify.signingHint')}</Typography.Paragraph>
          <AddEndpointForm />
        </Card>
        <Card
          title={t('notify.listTitle')}
          extra={
            isAdmin && (
              <Space>
                <span>{t('notify.allUsers')}</span>
                <Switch checked={all} onChange={setAll} aria-label={t('notify.allUsers')} />
              </Space>
            )
          }
        >
          <ApiErrorAlert error={endpoints.error} />
          <Table<NotifyEndpoint>
            data-testid="notify-table"
            rowKey="id"
            loading={endpoints.isLoading}
            dataSource={endpoints.data?.items ?? []}
            pagination={{ hideOnSinglePage: true, pageSize: 50 }}
            columns={[
              { title: t('notify.name'), dataIndex: 'name', render: (v: string) => <strong>{v}</strong> },
              ...(all ? [{ title: t('notify.owner'), dataIndex: 'owner' }] : []),
              { title: t('notify.kind'), dataIndex: 'kind', render: (v: EndpointKind) => <Tag>{t(`notify.kinds.${v}`)}</Tag> },
              { title: t('notify.url'), dataIndex: 'url', render: (v: string) => <Typography.Text className="mono" ellipsis style={{ maxWidth: 260 }}>{v}</Typography.Text> },
              { title: t('notify.signed'), dataIndex: 'has_secret', render: (v: boolean) => (v ? <Tag color="green">{t('common.yes')}</Tag> : <Tag>{t('common.no')}</Tag>) },
              { title: t('notify.filters'), render: (_, e) => filters(e) },
              {
                title: t('common.actions'),
                render: (_, e) => (
                  <Space>
                    <Button size="small" onClick={() => test.mutate(e)} data-testid={`notify-test-${e.name}`}>{t('notify.test')}</Button>
                    <Button size="small" onClick={() => setSelected(e)} data-testid={`notify-log-${e.name}`}>{t('notify.log')}</Button>
                    <Popconfirm title={t('notify.deleteConfirm', { name: e.name })} onConfirm={() => remove.mutate(e)} okButtonProps={{ danger: true }}>
                      <Button size="small" danger>{t('common.delete')}</Button>
                    </Popconfirm>
                  </Space>
                ),
              },
            ]}
          />
        </Card>
        {selected && <DeliveryLog endpoint={selected} />}
      </Space>
    </>
  );
}
