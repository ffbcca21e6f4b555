/**
 * SSH public keys (user guide step 2): add with immediate feedback, fingerprint, rename, delete,
 * and the rotation procedure. A pasted private key is refused here and never sent: the field is
 * emptied at once and the form will not submit it.
 */
import { Alert, App, Button, Card, Form, Input, Modal, Popconfirm, Space, Switch, Table, Tag, Typography } from 'antd';
import { PlusOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link } from 'react-router-dom';
import { ApiError } from '../api/client';
import { keysApi } from '../api/endpoints';
import type { SshKey } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { JobStatusTag } from '../components/StatusTag';
import { useSession } from '../auth';
import { checkPublicKey, fingerprintOf, looksLikePrivateKey, type KeyCheck } from '../lib/sshKey';
import { formatTime } from '../lib/format';

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

function useKeyFeedback(text: string): { check: KeyCheck; fingerprint: string | null } {
  const check = checkPublicKey(text);
  const [fingerprint, setFingerprint] = useState<string | null>(null);
  const blob = check.kind === 'ok' ? check.blob : null;
  useEffect(() => {
    let live = true;
    setFingerprint(null);
    if (blob) void fingerprintOf(blob).then((fp) => live && setFingerprint(fp));
    return () => {
      live = false;
    };
  }, [text]); // the blob is derived from text
  return { check, fingerprint };
}

export function AddKeyForm({ onAdded }: { onAdded?: (key: SshKey) => void }) {
  const { t } = useTranslation();
  const [form] = Form.useForm<{ name: string; public_key: string }>();
  const client = useQueryClient();
  const [refusedPrivate, setRefusedPrivate] = useState(false);
  const [error, setError] = useState<unknown>(null);
  // The key field shows live feedback, so the server's verdict on it is kept here and shown first.
  const [serverKeyErrors, setServerKeyErrors] = useState<string[]>([]);
  const text = Form.useWatch('public_key', form) ?? '';
  const { check, fingerprint } = useKeyFeedback(text);
  const add = useMutation({
    mutationFn: keysApi.create,
    onSuccess: (key) => {
      form.resetFields();
      setError(null);
      setServerKeyErrors([]);
      void client.invalidateQueries({ queryKey: ['keys'] });
      onAdded?.(key);
    },
    onError: (err) => {
      setError(err);
      setServerKeyErrors(applyApiError(form, err, ['name', 'public_key']).public_key ?? []);
    },
  });

  const feedback = (() => {
    if (refusedPrivate) return { status: 'error' as const, help: t('keys.privateKeyRefused') };
    if (serverKeyErrors.length) return { status: 'error' as const, help: serverKeyErrors.join('; ') };
    switch (check.kind) {
      case 'empty':
        return { status: undefined, help: t('keys.publicKeyHelp') };
      case 'ok':
        return {
          status: 'success' as const,
          help: (
            <span data-testid="key-feedback-ok">
              {t('keys.looksValid', { type: check.type })}
              {check.comment && <> · {t('keys.comment')}: {check.comment}</>}
              {fingerprint && (
                <>
                  {' '}
                  · <span className="mono">{fingerprint}</span>
                </>
              )}
            </span>
          ),
        };
      case 'unknown_type':
        return { status: 'error' as const, help: t('keys.unknownType', { type: check.type }) };
      case 'multiple_lines':
        return { status: 'error' as const, help: t('keys.multipleLines') };
      case 'bad_base64':
        return { status: 'error' as const, help: t('keys.badBase64') };
      case 'type_mismatch':
        return { status: 'error' as const, help: t('keys.typeMismatch', check) };
      default:
        return { status: 'error' as const, help: t('keys.privateKeyRefused') };
    }
  })();

  const submit = (values: { name: string; public_key: string }) => {
    if (looksLikePrivateKey(values.public_key ?? '')) {
      form.setFieldValue('public_key', '');
      setRefusedPrivate(true);
      return;
    }
    if (checkPublicKey(values.public_key).kind !== 'ok') return;
    add.mutate({ name: values.name.trim(), public_key: values.public_key.trim() });
  };

  return (
    <Form form={form} layout="vertical" onFinish={submit} data-testid="add-key-form" requiredMark="optional">
      <ApiErrorAlert error={error} className="form-alert" />
      <Form.Item
        name="name"
        label={t('keys.name')}
        extra={t('keys.nameHint')}
        rules={[
          { required: true, message: t('keys.nameRequired') },
          { pattern: NAME_PATTERN, message: t('keys.namePattern') },
        ]}
      >
        <Input placeholder="my-workstation" data-testid="key-name" autoComplete="off" />
      </Form.Item>
      <Form.Item
        name="public_key"
        label={t('keys.publicKey')}
        validateStatus={feedback.status}
        help={feedback.help}
        rules={[{ required: true, message: t('keys.publicKeyRequired') }]}
        getValueFromEvent={(event: React.ChangeEvent<HTMLTextAreaElement>) => {
          const value = event.target.value;
          setServerKeyErrors([]);
          if (looksLikePrivateKey(value)) {
            // Refused on sight: the private key is dropped from the form and never submitted.
            setRefusedPrivate(true);
            return '';
          }
          setRefusedPrivate(false);
          return value;
        }}
      >
        <Input.TextArea
          rows={4}
          className="mono"
          placeholder="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... rlark-training"
          data-testid="key-public"
          spellCheck={false}
          autoComplete="off"
        />
      </Form.Item>
      <Button type="primary" htmlType="submit" icon={<PlusOutlined />} loading={add.isPending} data-testid="key-submit">
        {t('keys.add')}
      </Button>
    </Form>
  );
}

function RenameModal({ sshKey, onClose }: { sshKey: SshKey | null; onClose: () => void }) {
  const { t } = useTranslation();
  const [form] = Form.useForm<{ name: string }>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    if (sshKey) form.setFieldsValue({ name: sshKey.name });
    setError(null);
  }, [sshKey, form]);
  const rename = useMutation({
    mutationFn: (name: string) => keysApi.rename(sshKey!.id, name),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ['keys'] });
      onClose();
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['name']);
    },
  });
  return (
    <Modal open={Boolean(sshKey)} title={t('keys.rename')} onCancel={onClose} onOk={() => form.submit()} confirmLoading={rename.isPending} destroyOnHidden>
      <ApiErrorAlert error={error} />
      <Form form={form} layout="vertical" onFinish={(v) => rename.mutate(v.name.trim())}>
        <Form.Item name="name" label={t('keys.name')} rules={[{ required: true, message: t('keys.nameRequired') }, { pattern: NAME_PATTERN, message: t('keys.namePattern') }]}>
          <Input data-testid="rename-input" />
        </Form.Item>
      </Form>
    </Modal>
  );
}

interface JobUsingKey {
  id: string;
  name: string;
  status: string;
}

/** The jobs a 409 `key_in_use` names (the gateway asked the scheduler), or null for any other error. */
function jobsUsingKey(error: unknown): { jobs: JobUsingKey[]; total: number } | null {
  if (!(error instanceof ApiError) || error.code !== 'key_in_use') return null;
  const jobs = Array.isArray(error.extra.jobs) ? (error.extra.jobs as JobUsingKey[]) : [];
  const total = typeof error.extra.total === 'number' ? error.extra.total : jobs.length;
  return { jobs, total };
}

/** Asks before deleting a key that pending or running jobs use, listing them; "Delete anyway" forces it. */
function KeyInUseModal({ sshKey, use, onForce, onClose, loading }: { sshKey: SshKey | null; use: { jobs: JobUsingKey[]; total: number } | null; onForce: () => void; onClose: () => void; loading: boolean }) {
  const { t } = useTranslation();
  return (
    <Modal
      open={Boolean(sshKey && use)}
      title={t('keys.inUseTitle', { name: sshKey?.name ?? '' })}
      onCancel={onClose}
      onOk={onForce}
      okText={t('keys.deleteAnyway')}
      okButtonProps={{ danger: true, ...{ 'data-testid': 'key-delete-force' } }}
      confirmLoading={loading}
      destroyOnHidden
    >
      <div data-testid="key-in-use">
        <Typography.Paragraph>{t('keys.inUseText', { count: use?.total ?? 0 })}</Typography.Paragraph>
        <ul className="plain-list">
          {(use?.jobs ?? []).map((job) => (
            <li key={job.id}>
              <Link to={`/jobs/${encodeURIComponent(job.id)}`}>{job.name}</Link> <span className="mono">{job.id}</span> <JobStatusTag status={job.status} />
            </li>
          ))}
          {use && use.total > use.jobs.length && <li>{t('keys.inUseMore', { count: use.total - use.jobs.length })}</li>}
        </ul>
      </div>
    </Modal>
  );
}

export default function Keys() {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [all, setAll] = useState(false);
  const [renaming, setRenaming] = useState<SshKey | null>(null);
  const keys = useQuery({ queryKey: ['keys', all], queryFn: () => keysApi.list(all) });
  const [inUse, setInUse] = useState<{ key: SshKey; use: { jobs: JobUsingKey[]; total: number } } | null>(null);
  const remove = useMutation({
    mutationFn: ({ key, force }: { key: SshKey; force: boolean }) => keysApi.remove(key.id, force),
    onSuccess: () => {
      setInUse(null);
      void client.invalidateQueries({ queryKey: ['keys'] });
    },
    onError: (err, { key }) => {
      const use = jobsUsingKey(err);
      if (use) setInUse({ key, use });
      else void message.error(errorMessage(err));
    },
  });
  return (
    <>
      <PageTitle title={t('keys.title')} sub={t('keys.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <Card title={t('keys.addTitle')}>
          <Typography.Paragraph type="secondary">
            {t('keys.generateHint')} <Typography.Text code copyable>ssh-keygen -t ed25519 -C "rlark-training"</Typography.Text>{' '}
            {t('keys.thenPaste')} <Typography.Text code>~/.ssh/id_ed25519.pub</Typography.Text>
          </Typography.Paragraph>
          <AddKeyForm onAdded={(k) => void message.success(t('keys.added', { name: k.name }))} />
        </Card>
        <Card
          title={t('keys.listTitle')}
          extra={
            isAdmin && (
              <Space>
                <span>{t('keys.allUsers')}</span>
                <Switch checked={all} onChange={setAll} aria-label={t('keys.allUsers')} />
              </Space>
            )
          }
        >
          <ApiErrorAlert error={keys.error} />
          <Table<SshKey>
            data-testid="keys-table"
            rowKey="id"
            loading={keys.isLoading}
            dataSource={keys.data?.items ?? []}
            pagination={{ hideOnSinglePage: true, pageSize: 50 }}
            columns={[
              { title: t('keys.name'), dataIndex: 'name', render: (v: string) => <strong>{v}</strong> },
              ...(all ? [{ title: t('keys.owner'), dataIndex: 'owner' }] : []),
              { title: t('keys.type'), render: (_, k) => <Tag>{k.key_type}{k.bits ? ` · ${k.bits}` : ''}</Tag> },
              { title: t('keys.fingerprint'), dataIndex: 'fingerprint', render: (v: string) => <Typography.Text copyable className="mono">{v}</Typography.Text> },
              { title: t('keys.comment'), dataIndex: 'comment', render: (v: string) => v || '—' },
              { title: t('keys.createdAt'), dataIndex: 'created_at', render: formatTime },
              {
                title: t('common.actions'),
                render: (_, k) => (
                  <Space>
                    <Button size="small" onClick={() => setRenaming(k)}>{t('keys.rename')}</Button>
                    <Popconfirm title={t('keys.deleteConfirm', { name: k.name })} onConfirm={() => remove.mutate({ key: k, force: false })} okButtonProps={{ danger: true }}>
                      <Button size="small" danger>{t('common.delete')}</Button>
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
          data-testid="rotation-guide"
          title={t('keys.rotationTitle')}
          description={
            <ol className="plain-list">
              <li>{t('keys.rotation1')}</li>
              <li>{t('keys.rotation2')}</li>
              <li>{t('keys.rotation3')}</li>
            </ol>
          }
        />
      </Space>
      <RenameModal sshKey={renaming} onClose={() => setRenaming(null)} />
      <KeyInUseModal
        sshKey={inUse?.key ?? null}
        use={inUse?.use ?? null}
        loading={remove.isPending}
        onClose={() => setInUse(null)}
        onForce={() => inUse && remove.mutate({ key: inUse.key, force: true })}
      />
    </>
  );
}
