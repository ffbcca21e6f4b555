/**
 * Network domains (user guide step 3): the list with utilisation, and for admins the create form
 * whose CIDR is checked by the server as you type (`POST /domains:check`, debounced), so overlaps
 * with clusters' pod/service CIDRs or other domains show before submitting. Expanding a domain shows
 * its SSH tunnels as each cluster's agent reports them (state, RTT, bytes, last error).
 */
import { Alert, App, Button, Card, Col, Form, Input, Popconfirm, Progress, Row, Space, Table, Tag, Typography } from 'antd';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { domainsApi } from '../api/endpoints';
import type { Domain, DomainConflict, TunnelLinkState } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import { serverText } from '../i18n/server';
import PageTitle from '../components/PageTitle';
import { useSession } from '../auth';
import { checkCidr } from '../lib/cidr';
import { useDebounced } from '../lib/useDebounced';
import { formatBytes, formatTime, percent } from '../lib/format';

function conflictText(lang: string, conflict: DomainConflict | string): string {
  if (typeof conflict === 'string') return conflict;
  // An older netdomain sent no key: the conflict's kind names its sentence (ADR 0011).
  const said = conflict.message_key ? conflict : { message_key: `cidr_overlaps.${conflict.kind}`, params: { cidr: conflict.cidr ?? '', name: conflict.name ?? conflict.cluster ?? '' }, message: conflict.message };
  return serverText(lang, said) || [conflict.kind, conflict.cluster ?? conflict.name, conflict.cidr].filter(Boolean).join(' ');
}

export function CreateDomainForm() {
  const { t, i18n } = useTranslation();
  const [form] = Form.useForm<{ name: string; cidr: string; description?: string }>();
  const client = useQueryClient();
  const { message } = App.useApp();
  const [error, setError] = useState<unknown>(null);
  const cidr = (Form.useWatch('cidr', form) ?? '').trim();
  // The CIDR field shows live feedback, so the server's verdict on create is kept here and shown first.
  const [serverCidrErrors, setServerCidrErrors] = useState<string[]>([]);
  useEffect(() => setServerCidrErrors([]), [cidr]);
  const syntax = checkCidr(cidr);
  const settled = useDebounced(cidr, 350);
  const check = useQuery({
    queryKey: ['domain-check', settled],
    queryFn: () => domainsApi.check(settled),
    enabled: checkCidr(settled).kind === 'ok',
    retry: false,
    staleTime: 5_000,
  });
  const current = settled === cidr && syntax.kind === 'ok';
  const create = useMutation({
    mutationFn: domainsApi.create,
    onSuccess: (domain) => {
      void message.success(t('domains.created', { name: domain.name }));
      form.resetFields();
      setError(null);
      void client.invalidateQueries({ queryKey: ['domains'] });
    },
    onError: (err) => {
      setError(err);
      setServerCidrErrors(applyApiError(form, err, ['name', 'cidr', 'description']).cidr ?? []);
    },
  });

  let status: '' | 'error' | 'success' | 'validating' | 'warning' = '';
  let help: React.ReactNode = t('domains.cidrHelp');
  if (serverCidrErrors.length) {
    status = 'error';
    help = <span data-testid="cidr-conflict">{serverCidrErrors.join('; ')}</span>;
  } else if (syntax.kind === 'syntax') {
    status = 'error';
    help = t('domains.cidrSyntax');
  } else if (syntax.kind === 'host_bits') {
    status = 'error';
    help = t('domains.cidrHostBits', { network: syntax.network });
  } else if (syntax.kind === 'ok') {
    if (!current || check.isFetching) {
      status = 'validating';
      help = t('domains.checking');
    } else if (check.error) {
      status = 'error';
      help = <span data-testid="cidr-conflict">{errorMessage(check.error)}</span>;
    } else if (check.data && !check.data.ok) {
      status = 'error';
      const reasons = [
        ...(check.data.error?.message ? [serverText(i18n.language, check.data.error)] : []),
        ...(check.data.conflicts ?? []).map((c) => conflictText(i18n.language, c)),
      ];
      help = <span data-testid="cidr-conflict">{reasons.length ? reasons.join('; ') : t('domains.conflictUnknown')}</span>;
    } else if (check.data?.ok) {
      status = 'success';
      help = (
        <span data-testid="cidr-ok">
          {t('domains.cidrOk', { count: check.data.capacity ?? syntax.addresses })}
          {check.data.cidr && check.data.cidr !== cidr ? ` · ${check.data.cidr}` : ''}
        </span>
      );
    }
  }
  const blocked = (status === 'error' && !serverCidrErrors.length) || status === 'validating';

  return (
    <Form
      form={form}
      layout="vertical"
      data-testid="domain-form"
      onFinish={(v) => !blocked && create.mutate({ name: v.name.trim(), cidr: v.cidr.trim(), description: v.description?.trim() || undefined })}
    >
      <ApiErrorAlert error={error} />
      <Row gutter={16}>
        <Col span={8}>
          <Form.Item name="name" label={t('domains.name')} rules={[{ required: true, message: t('domains.nameRequired') }, { pattern: /^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$/, message: t('domains.namePattern') }]}>
            <Input placeholder="dom-a" data-testid="domain-name" autoComplete="off" />
          </Form.Item>
        </Col>
        <Col span={8}>
          <Form.Item
            name="cidr"
            label={t('domains.cidr')}
            validateStatus={status || undefined}
            hasFeedback
            help={help}
            rules={[{ required: true, message: t('domains.cidrRequired') }]}
          >
            <Input placeholder="10.100.0.0/16" className="mono" data-testid="domain-cidr" autoComplete="off" />
          </Form.Item>
        </Col>
        <Col span={8}>
          <Form.Item name="description" label={t('domains.description')}>
            <Input data-testid="domain-description" />
          </Form.Item>
        </Col>
      </Row>
      <Button type="primary" htmlType="submit" loading={create.isPending} disabled={blocked} data-testid="domain-submit">
        {t('domains.create')}
      </Button>
    </Form>
  );
}

/** Clusters with addresses in the domain (from the domain's detail). */
function DomainClusters({ domain }: { domain: Domain }) {
  const { t } = useTranslation();
  const detail = useQuery({ queryKey: ['domain', domain.name], queryFn: () => domainsApi.get(domain.name), enabled: !domain.clusters });
  const clusters = domain.clusters ?? detail.data?.clusters ?? [];
  if (!clusters.length) return <>—</>;
  return (
    <Space size={4} wrap>
      {clusters.map((c) =>
        typeof c === 'string' ? (
          <Tag key={c}>{c}</Tag>
        ) : (
          <Tag key={c.cluster}>{t('domains.clusterUsage', { cluster: c.cluster, count: c.allocated })}</Tag>
        ),
      )}
    </Space>
  );
}

const TUNNEL_COLORS: Record<string, string> = { up: 'success', down: 'error', connecting: 'processing' };

/** The domain's tunnels: one row per (cluster, peer) link report, refreshed while shown. */
export function DomainTunnels({ name }: { name: string }) {
  const { t } = useTranslation();
  const detail = useQuery({ queryKey: ['domain', name], queryFn: () => domainsApi.get(name), refetchInterval: 5000 });
  const states = detail.data?.tunnel_states ?? [];
  const links = detail.data?.tunnels?.links ?? [];
  return (
    <Space orientation="vertical" size="small" style={{ width: '100%' }} data-testid={`domain-tunnels-${name}`}>
      <Typography.Text strong>{t('domains.tunnelsTitle')}</Typography.Text>
      {links.length > 0 && (
        <Space size={4} wrap data-testid="domain-links">
          {links.map((l) => (
            <Tag key={`${l.a}/${l.b}`}>
              {l.via ? t('domains.linkVia', { a: l.a, b: l.b, via: l.via }) : t('domains.link', { a: l.a, b: l.b })}
            </Tag>
          ))}
        </Space>
      )}
      <ApiErrorAlert error={detail.error} />
      {!detail.isLoading && !links.length && !states.length && (
        <Typography.Text type="secondary">{t('domains.tunnelsEmpty')}</Typography.Text>
      )}
      {!detail.isLoading && links.length > 0 && !states.length && (
        <Typography.Text type="secondary">{t('domains.tunnelsNoReport')}</Typography.Text>
      )}
      {states.length > 0 && (
        <Table<TunnelLinkState>
          size="small"
          rowKey={(s) => `${s.cluster}/${s.peer}`}
          dataSource={states}
          pagination={false}
          columns={[
            { title: t('domains.tunnelFrom'), dataIndex: 'cluster' },
            { title: t('domains.tunnelPeer'), dataIndex: 'peer' },
            {
              title: t('domains.tunnelState'),
              dataIndex: 'state',
              render: (v: string) => (
                <Tag color={TUNNEL_COLORS[v] ?? 'default'} data-testid="tunnel-state">
                  {t(`domains.tunnelStates.${v}`, { defaultValue: v })}
                </Tag>
              ),
            },
            { title: t('domains.tunnelRtt'), dataIndex: 'rtt_ms', render: (v?: number | null) => (v == null ? '—' : `${v.toFixed(2)} ms`) },
            { title: t('domains.tunnelSent'), dataIndex: 'bytes_sent', render: (v: number) => formatBytes(v) },
            { title: t('domains.tunnelReceived'), dataIndex: 'bytes_received', render: (v: number) => formatBytes(v) },
            { title: t('domains.tunnelSince'), dataIndex: 'since', render: formatTime },
            {
              title: t('domains.tunnelError'),
              dataIndex: 'last_error',
              render: (v: string) => (v ? <Typography.Text type="danger">{v}</Typography.Text> : '—'),
            },
          ]}
        />
      )}
    </Space>
  );
}

function Utilisation({ domain }: { domain: Domain }) {
  const { t } = useTranslation();
  const known = domain.capacity !== undefined && domain.allocated !== undefined;
  const detail = useQuery({ queryKey: ['domain', domain.name], queryFn: () => domainsApi.get(domain.name), enabled: !known });
  const d = known ? domain : detail.data;
  if (!d || d.capacity === undefined) return <>—</>;
  return (
    <Space orientation="vertical" size={0} style={{ width: 200 }}>
      <span>{t('domains.allocatedOf', { allocated: d.allocated ?? 0, capacity: d.capacity })}</span>
      <Progress percent={percent(d.allocated ?? 0, d.capacity)} size="small" />
    </Space>
  );
}

export default function Domains() {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const domains = useQuery({ queryKey: ['domains'], queryFn: domainsApi.list });
  const remove = useMutation({
    mutationFn: domainsApi.remove,
    onSuccess: () => void client.invalidateQueries({ queryKey: ['domains'] }),
    onError: (err) => void message.error(errorMessage(err)),
  });
  return (
    <>
      <PageTitle title={t('domains.title')} sub={t('domains.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <Alert
          type="info"
          showIcon
          title={t('domains.whenTitle')}
          description={
            <ul className="plain-list">
              <li>{t('domains.when1')}</li>
              <li>{t('domains.when2')}</li>
              <li>{t('domains.when3')}</li>
            </ul>
          }
        />
        {isAdmin && (
          <Card title={t('domains.createTitle')}>
            <CreateDomainForm />
          </Card>
        )}
        <Card title={t('domains.listTitle')}>
          <ApiErrorAlert error={domains.error} />
          <Table<Domain>
            data-testid="domains-table"
            rowKey="name"
            loading={domains.isLoading}
            dataSource={domains.data?.items ?? []}
            pagination={{ hideOnSinglePage: true, pageSize: 50 }}
            expandable={{ expandedRowRender: (d) => <DomainTunnels name={d.name} />, columnTitle: t('domains.showTunnels') }}
            columns={[
              {
                title: t('domains.name'),
                dataIndex: 'name',
                render: (v: string, d) => (
                  <Space orientation="vertical" size={2}>
                    <strong>{v}</strong>
                    {(d.warnings ?? []).map((w, i) => (
                      <Typography.Text key={i} type="warning" style={{ fontSize: 12 }}>
                        {w}
                      </Typography.Text>
                    ))}
                  </Space>
                ),
              },
              { title: t('domains.cidr'), dataIndex: 'cidr', render: (v: string) => <Typography.Text copyable className="mono">{v}</Typography.Text> },
              { title: t('domains.description'), dataIndex: 'description', render: (v?: string) => v || '—' },
              { title: t('domains.utilisation'), render: (_, d) => <Utilisation domain={d} /> },
              { title: t('domains.clusters'), render: (_, d) => <DomainClusters domain={d} /> },
              { title: t('keys.createdAt'), dataIndex: 'created_at', render: formatTime },
              ...(isAdmin
                ? [
                    {
                      title: t('common.actions'),
                      render: (_: unknown, d: Domain) => (
                        <Popconfirm title={t('domains.deleteConfirm', { name: d.name })} onConfirm={() => remove.mutate(d.name)} okButtonProps={{ danger: true }}>
                          <Button size="small" danger>{t('common.delete')}</Button>
                        </Popconfirm>
                      ),
                    },
                  ]
                : []),
            ]}
          />
        </Card>
      </Space>
    </>
  );
}
