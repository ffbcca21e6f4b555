/** Admin console: register clusters (agent credential shown once) and manage users. */
import { App, Button, Card, Col, DatePicker, Form, Input, Modal, Popconfirm, Radio, Row, Select, Space, Table, Tabs, Tag } from 'antd';
import { PlusOutlined } from '@ant-design/icons';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Link, useNavigate, useParams } from 'react-router-dom';
import { auditApi, clustersApi, usersApi } from '../../api/endpoints';
import type { AuditEntry, ClusterCreate, Role, User } from '../../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../../components/ApiErrorAlert';
import CredentialModal from '../../components/CredentialModal';
import PageTitle from '../../components/PageTitle';
import { OnlineTag } from '../../components/StatusTag';
import { useSession } from '../../auth';
import { checkCidr } from '../../lib/cidr';
import { parseTerm } from '../../lib/selector';
import { formatTime } from '../../lib/format';

interface ClusterForm {
  name: string;
  display_name?: string;
  category?: string;
  region?: string;
  runtime: 'local' | 'kubernetes';
  pod_cidrs: string[];
  service_cidrs: string[];
  labels: string[];
}

const CLUSTER_FIELDS = ['name', 'display_name', 'category', 'region', 'runtime', 'pod_cidrs', 'service_cidrs', 'labels'];

export function RegisterClusterForm() {
  const { t } = useTranslation();
  const [form] = Form.useForm<ClusterForm>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const [credential, setCredential] = useState<{ cluster: string; value: string } | null>(null);
  const create = useMutation({
    mutationFn: (body: ClusterCreate) => clustersApi.create(body),
    onSuccess: (cluster) => {
      setError(null);
      form.resetFields();
      setCredential({ cluster: cluster.name, value: cluster.agent_credential });
      void client.invalidateQueries({ queryKey: ['clusters'] });
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, CLUSTER_FIELDS);
    },
  });
  const cidrRule = {
    validator: (_: unknown, values: string[] = []) => {
      const bad = values.filter((v) => checkCidr(v).kind !== 'ok');
      return bad.length ? Promise.reject(new Error(t('admin.badCidrs', { values: bad.join(', ') }))) : Promise.resolve();
    },
  };
  const submit = (v: ClusterForm) =>
    create.mutate({
      name: v.name.trim(),
      display_name: v.display_name?.trim() || undefined,
      category: v.category?.trim() || undefined,
      region: v.region?.trim() || undefined,
      runtime: v.runtime,
      pod_cidrs: v.pod_cidrs ?? [],
      service_cidrs: v.service_cidrs ?? [],
      labels: Object.fromEntries((v.labels ?? []).map((term) => parseTerm(term)).filter((p) => p !== null).map((p) => [p.key, p.value])),
    });
  return (
    <>
      <Form form={form} layout="vertical" initialValues={{ runtime: 'kubernetes', pod_cidrs: [], service_cidrs: [], labels: [] }} onFinish={submit} data-testid="register-cluster-form">
        <ApiErrorAlert error={error} />
        <Row gutter={16}>
          <Col span={6}>
            <Form.Item name="name" label={t('admin.clusterName')} rules={[{ required: true, message: t('admin.clusterNameRequired') }, { pattern: /^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$/, message: t('admin.clusterNamePattern') }]}>
              <Input placeholder="gpu-a" data-testid="cluster-name" autoComplete="off" />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item name="display_name" label={t('admin.displayName')}>
              <Input placeholder="GPU cluster A" />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item name="category" label={t('clusters.category')}>
              <Input placeholder="cloud" />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item name="region" label={t('clusters.region')}>
              <Input placeholder="cn-north" />
            </Form.Item>
          </Col>
        </Row>
        <Row gutter={16}>
          <Col span={6}>
            <Form.Item name="runtime" label={t('clusters.runtime')}>
              <Radio.Group optionType="button" options={[{ value: 'kubernetes', label: 'Kubernetes' }, { value: 'local', label: t('admin.local') }]} />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item name="pod_cidrs" label={t('clusters.podCidrs')} rules={[cidrRule]} extra={t('admin.cidrsHint')}>
              <Select mode="tags" tokenSeparators={[',', ' ']} placeholder="10.244.0.0/16" data-testid="cluster-pod-cidrs" aria-label={t('clusters.podCidrs')} />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item name="service_cidrs" label={t('clusters.serviceCidrs')} rules={[cidrRule]}>
              <Select mode="tags" tokenSeparators={[',', ' ']} placeholder="10.96.0.0/12" aria-label={t('clusters.serviceCidrs')} />
            </Form.Item>
          </Col>
          <Col span={6}>
            <Form.Item
              name="labels"
              label={t('admin.labels')}
              rules={[
                {
                  validator: (_: unknown, values: string[] = []) => {
                    const bad = values.filter((v) => !parseTerm(v));
                    return bad.length ? Promise.reject(new Error(t('wizard.err.selectorTerm', { terms: bad.join(', ') }))) : Promise.resolve();
                  },
                },
              ]}
            >
              <Select mode="tags" tokenSeparators={[',', ' ']} placeholder="zone=a" aria-label={t('admin.labels')} />
            </Form.Item>
          </Col>
        </Row>
        <Button type="primary" htmlType="submit" icon={<PlusOutlined />} loading={create.isPending} data-testid="register-cluster-submit">
          {t('admin.register')}
        </Button>
      </Form>
      <CredentialModal credential={credential?.value ?? null} cluster={credential?.cluster ?? ''} onClose={() => setCredential(null)} />
    </>
  );
}

function ClustersTab() {
  const { t } = useTranslation();
  const clusters = useQuery({ queryKey: ['clusters'], queryFn: clustersApi.list });
  return (
    <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
      <Card title={t('admin.registerTitle')}>
        <RegisterClusterForm />
      </Card>
      <Card title={t('admin.clustersTitle')}>
        <Table
          rowKey="name"
          size="small"
          loading={clusters.isLoading}
          dataSource={clusters.data?.items ?? []}
          pagination={{ hideOnSinglePage: true }}
          columns={[
            { title: t('clusters.name'), dataIndex: 'name', render: (n: string) => <Link to={`/clusters/${encodeURIComponent(n)}`}>{n}</Link> },
            { title: t('clusters.runtime'), dataIndex: 'runtime' },
            { title: t('clusters.status'), dataIndex: 'online', render: (v: boolean) => <OnlineTag online={v} /> },
            { title: t('clusters.podCidrs'), dataIndex: 'pod_cidrs', render: (v?: string[]) => (v ?? []).join(', ') || '—' },
            { title: t('clusters.serviceCidrs'), dataIndex: 'service_cidrs', render: (v?: string[]) => (v ?? []).join(', ') || '—' },
            { title: t('clusters.lastSeen'), dataIndex: 'last_seen', render: formatTime },
          ]}
        />
      </Card>
    </Space>
  );
}

function UserModal({ user, open, onClose }: { user: User | null; open: boolean; onClose: () => void }) {
  const { t } = useTranslation();
  const [form] = Form.useForm<{ username: string; password?: string; role: Role }>();
  const client = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const save = useMutation({
    mutationFn: async (v: { username: string; password?: string; role: Role }) =>
      user ? usersApi.update(user.username, { role: v.role, password: v.password || undefined }) : usersApi.create({ username: v.username.trim(), password: v.password ?? '', role: v.role }),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ['users'] });
      onClose();
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['username', 'password', 'role']);
    },
  });
  return (
    <Modal
      open={open}
      title={user ? t('admin.editUser', { name: user.username }) : t('admin.addUser')}
      onCancel={onClose}
      onOk={() => form.submit()}
      confirmLoading={save.isPending}
      destroyOnHidden
      afterOpenChange={(visible) => {
        if (visible) {
          setError(null);
          form.setFieldsValue({ username: user?.username ?? '', password: '', role: user?.role ?? 'user' });
        }
      }}
    >
      <ApiErrorAlert error={error} />
      <Form form={form} layout="vertical" onFinish={(v) => save.mutate(v)} preserve={false}>
        <Form.Item name="username" label={t('login.username')} rules={[{ required: true, message: t('login.usernameRequired') }]}>
          <Input disabled={Boolean(user)} autoComplete="off" data-testid="user-username" />
        </Form.Item>
        <Form.Item
          name="password"
          label={user ? t('admin.newPassword') : t('login.password')}
          rules={user ? [] : [{ required: true, message: t('login.passwordRequired') }]}
          extra={user ? t('admin.passwordKeep') : undefined}
        >
          <Input.Password autoComplete="new-password" data-testid="user-password" />
        </Form.Item>
        <Form.Item name="role" label={t('admin.role')}>
          <Radio.Group optionType="button" options={[{ value: 'user', label: t('roles.user') }, { value: 'admin', label: t('roles.admin') }]} />
        </Form.Item>
      </Form>
    </Modal>
  );
}

function UsersTab() {
  const { t } = useTranslation();
  const { user: me } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const users = useQuery({ queryKey: ['users'], queryFn: usersApi.list });
  const [editing, setEditing] = useState<User | null>(null);
  const [open, setOpen] = useState(false);
  const remove = useMutation({
    mutationFn: usersApi.remove,
    onSuccess: () => void client.invalidateQueries({ queryKey: ['users'] }),
    onError: (err) => void message.error(errorMessage(err)),
  });
  return (
    <Card
      title={t('admin.usersTitle')}
      extra={
        <Button type="primary" icon={<PlusOutlined />} onClick={() => { setEditing(null); setOpen(true); }} data-testid="add-user">
          {t('admin.addUser')}
        </Button>
      }
    >
      <ApiErrorAlert error={users.error} />
      <Table<User>
        data-testid="users-table"
        rowKey="username"
        size="small"
        loading={users.isLoading}
        dataSource={users.data?.items ?? []}
        pagination={{ hideOnSinglePage: true, pageSize: 50 }}
        columns={[
          { title: t('login.username'), dataIndex: 'username' },
          { title: t('admin.role'), dataIndex: 'role', render: (r: Role) => <Tag color={r === 'admin' ? 'gold' : 'default'}>{t(`roles.${r}`)}</Tag> },
          { title: t('keys.createdAt'), dataIndex: 'created_at', render: formatTime },
          {
            title: t('common.actions'),
            render: (_, u) => (
              <Space>
                <Button size="small" onClick={() => { setEditing(u); setOpen(true); }}>{t('common.edit')}</Button>
                <Popconfirm title={t('admin.deleteUser', { name: u.username })} onConfirm={() => remove.mutate(u.username)} okButtonProps={{ danger: true }} disabled={u.username === me?.username}>
                  <Button size="small" danger disabled={u.username === me?.username}>{t('common.delete')}</Button>
                </Popconfirm>
              </Space>
            ),
          },
        ]}
      />
      <UserModal user={editing} open={open} onClose={() => setOpen(false)} />
    </Card>
  );
}

function AuditTab() {
  const { t } = useTranslation();
  const [filters, setFilters] = useState<{ actor?: string; action?: string; since?: string }>({});
  const [page, setPage] = useState({ page: 1, page_size: 50 });
  const query = { ...filters, ...page };
  const audit = useQuery({ queryKey: ['audit', query], queryFn: () => auditApi.list(query), placeholderData: (prev) => prev });
  return (
    <Card title={t('admin.auditTitle')}>
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search allowClear placeholder={t('admin.auditActor')} aria-label={t('admin.auditActor')} onSearch={(v) => setFilters((f) => ({ ...f, actor: v || undefined }))} style={{ width: 200 }} />
        <Input.Search allowClear placeholder={t('admin.auditAction')} aria-label={t('admin.auditAction')} onSearch={(v) => setFilters((f) => ({ ...f, action: v || undefined }))} style={{ width: 220 }} />
        <DatePicker showTime aria-label={t('admin.auditSince')} placeholder={t('admin.auditSince')} onChange={(d) => setFilters((f) => ({ ...f, since: d ? d.toISOString() : undefined }))} />
      </Space>
      <ApiErrorAlert error={audit.error} />
      <Table<AuditEntry>
        data-testid="audit-table"
        size="small"
        rowKey={(e) => String(e.id ?? `${e.at}-${e.action}-${e.target}`)}
        loading={audit.isLoading}
        dataSource={audit.data?.items ?? []}
        pagination={{ current: page.page, pageSize: page.page_size, total: audit.data?.total ?? 0, onChange: (p, s) => setPage({ page: p, page_size: s }) }}
        columns={[
          { title: t('admin.auditAt'), dataIndex: 'at', render: formatTime },
          { title: t('admin.auditActor'), render: (_, e) => e.actor ?? e.who ?? '—' },
          { title: t('admin.auditAction'), dataIndex: 'action', render: (v: string) => <span className="mono">{v}</span> },
          { title: t('admin.auditTarget'), dataIndex: 'target', render: (v?: string) => v || '—' },
        ]}
      />
    </Card>
  );
}

export default function Admin() {
  const { t } = useTranslation();
  const { tab = 'clusters' } = useParams();
  const navigate = useNavigate();
  return (
    <>
      <PageTitle title={t('admin.title')} sub={t('admin.sub')} />
      <Tabs
        activeKey={tab}
        onChange={(key) => navigate(`/admin/${key}`)}
        items={[
          { key: 'clusters', label: t('admin.clustersTab'), children: <ClustersTab /> },
          { key: 'users', label: t('admin.usersTab'), children: <UsersTab /> },
          { key: 'audit', label: t('admin.auditTab'), children: <AuditTab /> },
        ]}
      />
    </>
  );
}
