/**
 * Named secrets (ADR 0025): tokens, API keys and object-storage credentials a job names and never carries.
 * Add (name + value), rotate (a new value, the next version), delete with confirmation; admins also manage a
 * project's. A value goes to the server once and never comes back: the list shows names, versions and use
 * only, the value field is masked, never autocompleted, and emptied the moment its request is sent.
 */
import { Alert, App, Button, Card, Form, Input, Modal, Popconfirm, Select, Space, Table, Tag, Typography } from 'antd';
import { PlusOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { projectsApi, secretsApi } from '../api/endpoints';
import type { Secret } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { useSession } from '../auth';
import { formatTime } from '../lib/format';

/** The server's rule (rlark_contracts.secrets.SECRET_NAME), checked here only to say it one step earlier. */
const NAME_PATTERN = /^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$/;

const HELP_YAML = `tasks:
  - name: trainer
    env:
      - name: HF_TOKEN
        secret: hf-token
    mounts:
      - name: datasets
        type: objectStorage
        source: s3://datasets/math
        path: /data
        secretRef: s3-datasets`;

/** One trailing line break is the paste's or the file's, not the secret's (as \`rlark secrets set\` reads stdin). */
export function submittedValue(value: string): string {
  return value.replace(/\r?\n$/, '');
}

/** A masked, multi-line value field: browsers neither remember nor suggest it, nor check its spelling. */
function SecretValueInput(props: { value?: string; onChange?: (e: React.ChangeEvent<HTMLTextAreaElement>) => void; testId: string }) {
  return (
    <Input.TextArea
      value={props.value}
      onChange={props.onChange}
      rows={3}
      className="mono secret-value"
      data-testid={props.testId}
      autoComplete="off"
      autoCorrect="off"
      autoCapitalize="off"
      spellCheck={false}
    />
  );
}

interface AddValues {
  name: string;
  value: string;
}

function AddSecretForm({ project }: { project?: string }) {
  const { t } = useTranslation();
  const { message } = App.useApp();
  const [form] = Form.useForm<AddValues>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const add = useMutation({
    mutationFn: secretsApi.create,
    onSuccess: (secret) => {
      form.resetFields();
      setError(null);
      void client.invalidateQueries({ queryKey: ['secrets'] });
      void message.success(t('secrets.added', { name: secret.name }));
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['name', 'value']);
    },
  });
  const submit = ({ name, value }: AddValues) => {
    // The value leaves the form as it is sent; a refusal asks for it again rather than keep it on the page.
    form.setFieldValue('value', '');
    add.mutate({ name: name.trim(), value: submittedValue(value), ...(project ? { project } : {}) });
  };
  return (
    <Form form={form} layout="vertical" onFinish={submit} data-testid="add-secret-form" requiredMark="optional" autoComplete="off">
      <ApiErrorAlert error={error} className="form-alert" />
      <Form.Item
        name="name"
        label={t('secrets.name')}
        extra={t('secrets.nameHint')}
        rules={[
          { required: true, message: t('secrets.nameRequired') },
          { pattern: NAME_PATTERN, message: t('secrets.namePattern') },
        ]}
      >
        <Input placeholder="hf-token" className="mono" data-testid="secret-name" autoComplete="off" spellCheck={false} style={{ maxWidth: 360 }} />
      </Form.Item>
      <Form.Item name="value" label={t('secrets.value')} extra={t('secrets.valueHint')} rules={[{ required: true, message: t('secrets.valueRequired') }]}>
        <SecretValueInput testId="secret-value" />
      </Form.Item>
      <Button type="primary" htmlType="submit" icon={<PlusOutlined />} loading={add.isPending} data-testid="secret-submit">
        {t('secrets.add')}
      </Button>
    </Form>
  );
}

function RotateModal({ secret, project, onClose }: { secret: Secret | null; project?: string; onClose: () => void }) {
  const { t } = useTranslation();
  const { message } = App.useApp();
  const [form] = Form.useForm<{ value: string }>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  useEffect(() => setError(null), [secret]);
  const rotate = useMutation({
    mutationFn: (value: string) => secretsApi.rotate(secret!.name, value, project),
    onSuccess: (rotated) => {
      void client.invalidateQueries({ queryKey: ['secrets'] });
      void message.success(t('secrets.rotated', { name: rotated.name, version: rotated.version }));
      onClose();
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['value']);
    },
  });
  const submit = ({ value }: { value: string }) => {
    form.setFieldValue('value', '');
    rotate.mutate(submittedValue(value));
  };
  return (
    <Modal
      open={Boolean(secret)}
      title={t('secrets.rotateTitle', { name: secret?.name ?? '' })}
      onCancel={onClose}
      onOk={() => form.submit()}
      okText={t('secrets.rotate')}
      okButtonProps={{ ...{ 'data-testid': 'rotate-submit' } }}
      confirmLoading={rotate.isPending}
      destroyOnHidden
    >
      <Typography.Paragraph type="secondary">{t('secrets.rotateText', { version: (secret?.version ?? 0) + 1 })}</Typography.Paragraph>
      <ApiErrorAlert error={error} className="form-alert" />
      <Form form={form} layout="vertical" onFinish={submit} autoComplete="off">
        <Form.Item name="value" label={t('secrets.newValue')} rules={[{ required: true, message: t('secrets.valueRequired') }]}>
          <SecretValueInput testId="rotate-value" />
        </Form.Item>
      </Form>
    </Modal>
  );
}

/** Admins choose whose secrets they manage: their own, or a project's (its members' jobs may name those). */
function ScopeSelect({ value, onChange }: { value: string; onChange: (project: string) => void }) {
  const { t } = useTranslation();
  const projects = useQuery({ queryKey: ['projects'], queryFn: projectsApi.list });
  return (
    <Space wrap>
      <span>{t('secrets.scope')}</span>
      <Select
        data-testid="secrets-scope"
        aria-label={t('secrets.scope')}
        value={value}
        onChange={onChange}
        loading={projects.isLoading}
        style={{ minWidth: 220 }}
        options={[
          { value: '', label: t('secrets.mine') },
          ...(projects.data?.items ?? []).map((p) => ({ value: p.name, label: t('secrets.projectOption', { name: p.name }) })),
        ]}
      />
    </Space>
  );
}

export default function Secrets() {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [scope, setScope] = useState('');
  const project = scope || undefined;
  const [rotating, setRotating] = useState<Secret | null>(null);
  const secrets = useQuery({ queryKey: ['secrets', scope], queryFn: () => secretsApi.list(project) });
  const remove = useMutation({
    mutationFn: (secret: Secret) => secretsApi.remove(secret.name, project),
    onSuccess: (_, secret) => {
      void client.invalidateQueries({ queryKey: ['secrets'] });
      void message.success(t('secrets.deleted', { name: secret.name }));
    },
    onError: (err) => void message.error(errorMessage(err)),
  });
  return (
    <>
      <PageTitle title={t('secrets.title')} sub={t('secrets.sub')} extra={isAdmin && <ScopeSelect value={scope} onChange={setScope} />} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        {isAdmin && project && <Alert type="info" showIcon title={t('secrets.scopeHint')} data-testid="project-scope-hint" />}
        <Card title={project ? t('secrets.addTitleProject', { project }) : t('secrets.addTitle')}>
          {/* A fresh form per scope, so a half-typed value never moves from one owner to another. */}
          <AddSecretForm key={scope} project={project} />
        </Card>
        <Card title={project ? t('secrets.listTitleProject', { project }) : t('secrets.listTitle')}>
          <ApiErrorAlert error={secrets.error} />
          <Table<Secret>
            data-testid="secrets-table"
            rowKey="name"
            loading={secrets.isLoading}
            dataSource={secrets.data?.items ?? []}
            pagination={{ hideOnSinglePage: true, pageSize: 50 }}
            locale={{ emptyText: t('secrets.empty') }}
            columns={[
              { title: t('secrets.name'), dataIndex: 'name', render: (v: string) => <strong className="mono">{v}</strong> },
              { title: t('secrets.version'), dataIndex: 'version', render: (v: number) => <Tag>v{v}</Tag> },
              {
                title: t('secrets.updated'),
                render: (_, s) => (
                  <span>
                    {formatTime(s.updated_at)}{' '}
                    <Typography.Text type="secondary">{t('secrets.updatedBy', { user: s.updated_by })}</Typography.Text>
                  </span>
                ),
              },
              { title: t('secrets.lastUsed'), dataIndex: 'last_used_at', render: (v: string | null) => (v ? formatTime(v) : t('secrets.neverUsed')) },
              {
                title: t('common.actions'),
                render: (_, s) => (
                  <Space>
                    <Button size="small" onClick={() => setRotating(s)} data-testid={`rotate-${s.name}`}>
                      {t('secrets.rotate')}
                    </Button>
                    <Popconfirm
                      title={t('secrets.deleteConfirm', { name: s.name })}
                      description={<div style={{ maxWidth: 360 }} data-testid="secret-delete-text">{t('secrets.deleteText')}</div>}
                      onConfirm={() => remove.mutate(s)}
                      okText={t('common.delete')}
                      okButtonProps={{ danger: true, ...{ 'data-testid': 'secret-delete-confirm' } }}
                    >
                      <Button size="small" danger data-testid={`delete-${s.name}`}>
                        {t('common.delete')}
                      </Button>
                    </Popconfirm>
                  </Space>
                ),
              },
            ]}
          />
        </Card>
        <Alert
          type="info"
          showIcon
          data-testid="secrets-help"
          title={t('secrets.helpTitle')}
          description={
            <>
              <Typography.Paragraph>{t('secrets.helpText')}</Typography.Paragraph>
              <pre className="yaml-view mono">{HELP_YAML}</pre>
              <Typography.Paragraph style={{ marginTop: 12, marginBottom: 0 }}>
                {t('secrets.helpCli')} <Typography.Text code copyable>{'rlark secrets set hf-token --from-stdin < token.txt'}</Typography.Text>
              </Typography.Paragraph>
            </>
          }
        />
      </Space>
      <RotateModal secret={rotating} project={project} onClose={() => setRotating(null)} />
    </>
  );
}
