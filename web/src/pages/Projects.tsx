/**
 * Projects and GPU quotas (issue 20, ADR 0020): every project you belong to (all of them for an admin)
 * with its quota — overall, per cluster, per GPU model, plus the borrowing limit and the highest priority its
 * jobs may ask — what its jobs hold now
 * and how many run or wait. Admins create projects, change quotas and members, and delete projects; the
 * server checks every figure and names the offending field (`quota.clusters.gpu-a`).
 */
import { App, Button, Card, Col, Form, Input, InputNumber, Modal, Popconfirm, Progress, Row, Select, Space, Table, Tag, Typography } from 'antd';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { projectsApi } from '../api/endpoints';
import type { Project, ProjectQuota } from '../api/types';
import ApiErrorAlert, { applyApiError, errorMessage } from '../components/ApiErrorAlert';
import PageTitle from '../components/PageTitle';
import { useSession } from '../auth';
import { formatTime, percent } from '../lib/format';

/** The quota as form values: `NAME=GPUS` tags for the per-cluster and per-model figures. */
interface QuotaValues {
  gpus: number;
  borrowing_limit: number;
  clusters: string[];
  models: string[];
  max_priority?: number | null;
}

const PAIR = /^(.+)=(\d+)$/;

/** `["gpu-a=8"]` → `{ "gpu-a": 8 }`; null when a tag is not NAME=GPUS. */
export function parsePairs(tags: string[] | undefined): Record<string, number> | null {
  const pairs: Record<string, number> = {};
  for (const tag of tags ?? []) {
    const match = PAIR.exec(tag.trim());
    if (!match) return null;
    pairs[match[1].trim()] = Number(match[2]);
  }
  return pairs;
}

function pairTags(pairs: Record<string, number>): string[] {
  return Object.entries(pairs).map(([name, gpus]) => `${name}=${gpus}`);
}

function quotaOf(values: QuotaValues): ProjectQuota {
  return {
    gpus: values.gpus,
    borrowing_limit: values.borrowing_limit ?? 0,
    clusters: parsePairs(values.clusters) ?? {},
    models: parsePairs(values.models) ?? {},
    max_priority: values.max_priority ?? null,
  };
}

/** The quota's fields; the server's 422 lands on the field it names (`clusters.gpu-a` → clusters). */
function QuotaFields() {
  const { t } = useTranslation();
  const pairsRule = { validator: (_: unknown, tags?: string[]) => (parsePairs(tags) ? Promise.resolve() : Promise.reject(new Error(t('projects.pairsInvalid')))) };
  return (
    <Row gutter={16}>
      <Col span={6}>
        <Form.Item name="gpus" label={t('projects.gpus')} rules={[{ required: true, message: t('projects.gpusRequired') }]} tooltip={t('projects.gpusHelp')}>
          <InputNumber min={0} max={1000000} precision={0} style={{ width: '100%' }} data-testid="project-gpus" />
        </Form.Item>
      </Col>
      <Col span={6}>
        <Form.Item name="borrowing_limit" label={t('projects.borrowingLimit')} tooltip={t('projects.borrowingHelp')}>
          <InputNumber min={0} max={1000000} precision={0} style={{ width: '100%' }} data-testid="project-borrowing" />
        </Form.Item>
      </Col>
      <Col span={6}>
        <Form.Item name="clusters" label={t('projects.perCluster')} rules={[pairsRule]} tooltip={t('projects.pairsHelp')}>
          <Select mode="tags" tokenSeparators={[',', ' ']} placeholder="gpu-a=8" open={false} data-testid="project-clusters" aria-label={t('projects.perCluster')} />
        </Form.Item>
      </Col>
      <Col span={6}>
        <Form.Item name="models" label={t('projects.perModel')} rules={[pairsRule]} tooltip={t('projects.pairsHelp')}>
          <Select mode="tags" tokenSeparators={[',', ' ']} placeholder="nvidia/H100=4" open={false} data-testid="project-models" aria-label={t('projects.perModel')} />
        </Form.Item>
      </Col>
      <Col span={6}>
        <Form.Item name="max_priority" label={t('projects.maxPriority')} tooltip={t('projects.maxPriorityHelp')}>
          <InputNumber min={-100} max={100} precision={0} style={{ width: '100%' }} placeholder={t('projects.noCap')} data-testid="project-max-priority" />
        </Form.Item>
      </Col>
    </Row>
  );
}

const QUOTA_FIELDS = ['gpus', 'borrowing_limit', 'clusters', 'models', 'max_priority'] as const;

export function CreateProjectForm() {
  const { t } = useTranslation();
  const [form] = Form.useForm<QuotaValues & { name: string; description?: string; members: string[] }>();
  const client = useQueryClient();
  const { message } = App.useApp();
  const [error, setError] = useState<unknown>(null);
  const create = useMutation({
    mutationFn: projectsApi.create,
    onSuccess: (project) => {
      void message.success(t('projects.created', { name: project.name }));
      form.resetFields();
      setError(null);
      void client.invalidateQueries({ queryKey: ['projects'] });
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['name', 'members', 'description', ...QUOTA_FIELDS], 'quota.');
    },
  });
  return (
    <Form
      form={form}
      layout="vertical"
      data-testid="project-form"
      initialValues={{ gpus: 0, borrowing_limit: 0, clusters: [], models: [], members: [] }}
      onFinish={(v) =>
        create.mutate({ name: v.name.trim(), description: v.description?.trim() ?? '', members: v.members ?? [], quota: quotaOf(v) })
      }
    >
      <ApiErrorAlert error={error} />
      <Row gutter={16}>
        <Col span={6}>
          <Form.Item
            name="name"
            label={t('projects.name')}
            rules={[{ required: true, message: t('projects.nameRequired') }, { pattern: /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, message: t('projects.namePattern') }]}
          >
            <Input placeholder="vision-lab" data-testid="project-name" autoComplete="off" />
          </Form.Item>
        </Col>
        <Col span={8}>
          <Form.Item name="description" label={t('projects.description')}>
            <Input data-testid="project-description" />
          </Form.Item>
        </Col>
        <Col span={10}>
          <Form.Item name="members" label={t('projects.members')}>
            <Select mode="tags" tokenSeparators={[',', ' ']} open={false} placeholder="alice, bob" data-testid="project-members" aria-label={t('projects.members')} />
          </Form.Item>
        </Col>
      </Row>
      <QuotaFields />
      <Button type="primary" htmlType="submit" loading={create.isPending} data-testid="project-submit">
        {t('projects.create')}
      </Button>
    </Form>
  );
}

/** An admin's dialog for one project's quota and members. */
function EditProject({ project, onClose }: { project: Project; onClose: () => void }) {
  const { t } = useTranslation();
  const [form] = Form.useForm<QuotaValues & { members: string[] }>();
  const client = useQueryClient();
  const { message } = App.useApp();
  const [error, setError] = useState<unknown>(null);
  const save = useMutation({
    mutationFn: async (v: QuotaValues & { members: string[] }) => {
      await projectsApi.setQuota(project.name, quotaOf(v));
      return projectsApi.setMembers(project.name, v.members ?? []);
    },
    onSuccess: () => {
      void message.success(t('projects.saved', { name: project.name }));
      void client.invalidateQueries({ queryKey: ['projects'] });
      onClose();
    },
    onError: (err) => {
      setError(err);
      applyApiError(form, err, ['members', ...QUOTA_FIELDS]);
      void client.invalidateQueries({ queryKey: ['projects'] });
    },
  });
  return (
    <Modal
      open
      width={900}
      title={t('projects.editTitle', { name: project.name })}
      okText={t('projects.save')}
      onOk={() => form.submit()}
      confirmLoading={save.isPending}
      onCancel={onClose}
      okButtonProps={{ 'data-testid': 'project-save' } as Record<string, string>}
    >
      <Form
        form={form}
        layout="vertical"
        data-testid="project-edit-form"
        initialValues={{ ...project.quota, clusters: pairTags(project.quota.clusters), models: pairTags(project.quota.models), members: project.members }}
        onFinish={(v) => save.mutate(v)}
      >
        <ApiErrorAlert error={error} />
        <QuotaFields />
        <Form.Item name="members" label={t('projects.members')}>
          <Select mode="tags" tokenSeparators={[',', ' ']} open={false} aria-label={t('projects.members')} />
        </Form.Item>
      </Form>
    </Modal>
  );
}

function QuotaCell({ quota }: { quota: ProjectQuota }) {
  const { t } = useTranslation();
  const scoped = [...Object.entries(quota.clusters), ...Object.entries(quota.models)];
  return (
    <Space orientation="vertical" size={2}>
      <span>{t('projects.gpuCount', { count: quota.gpus })}</span>
      {scoped.length > 0 && (
        <Space size={4} wrap>
          {scoped.map(([name, gpus]) => (
            <Tag key={name}>{`${name}: ${gpus}`}</Tag>
          ))}
        </Space>
      )}
      {quota.borrowing_limit > 0 && <Typography.Text type="secondary">{t('projects.borrowsUpTo', { count: quota.borrowing_limit })}</Typography.Text>}
      {quota.max_priority != null && <Typography.Text type="secondary">{t('projects.priorityUpTo', { cap: quota.max_priority })}</Typography.Text>}
    </Space>
  );
}

function UsageCell({ project }: { project: Project }) {
  const { t } = useTranslation();
  const { usage, quota } = project;
  const over = usage.gpus > quota.gpus;
  return (
    <Space orientation="vertical" size={2} style={{ width: 220 }} data-testid={`project-usage-${project.name}`}>
      <span>{t('projects.heldOf', { held: usage.gpus, quota: quota.gpus })}</span>
      <Progress percent={percent(Math.min(usage.gpus, quota.gpus), quota.gpus || 1)} size="small" status={over ? 'exception' : 'normal'} showInfo={false} />
      {over && <Typography.Text type="warning">{t('projects.borrowing', { count: usage.gpus - quota.gpus })}</Typography.Text>}
      {Object.keys(usage.clusters).length > 0 && (
        <Space size={4} wrap>
          {Object.entries(usage.clusters).map(([cluster, gpus]) => (
            <Tag key={cluster}>{`${cluster}: ${gpus}`}</Tag>
          ))}
        </Space>
      )}
    </Space>
  );
}

export default function Projects() {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  const { message } = App.useApp();
  const client = useQueryClient();
  const [editing, setEditing] = useState<Project | null>(null);
  const projects = useQuery({ queryKey: ['projects'], queryFn: projectsApi.list, refetchInterval: 10_000 });
  const remove = useMutation({
    mutationFn: projectsApi.remove,
    onSuccess: () => void client.invalidateQueries({ queryKey: ['projects'] }),
    onError: (err) => void message.error(errorMessage(err)),
  });
  return (
    <>
      <PageTitle title={t('projects.title')} sub={t('projects.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        {isAdmin && (
          <Card title={t('projects.createTitle')}>
            <CreateProjectForm />
          </Card>
        )}
        <Card title={isAdmin ? t('projects.listAll') : t('projects.listMine')}>
          <ApiErrorAlert error={projects.error} />
          <Table<Project>
            data-testid="projects-table"
            rowKey="name"
            loading={projects.isLoading}
            dataSource={projects.data?.items ?? []}
            locale={{ emptyText: isAdmin ? t('projects.emptyAdmin') : t('projects.empty') }}
            pagination={{ hideOnSinglePage: true, pageSize: 50 }}
            columns={[
              {
                title: t('projects.name'),
                dataIndex: 'name',
                render: (v: string, p) => (
                  <Space orientation="vertical" size={0}>
                    <strong>{v}</strong>
                    {p.description && <Typography.Text type="secondary">{p.description}</Typography.Text>}
                  </Space>
                ),
              },
              { title: t('projects.quota'), render: (_, p) => <QuotaCell quota={p.quota} /> },
              { title: t('projects.inUse'), render: (_, p) => <UsageCell project={p} /> },
              {
                title: t('projects.jobs'),
                render: (_, p) => t('projects.jobCounts', { running: p.usage.running_jobs, waiting: p.usage.waiting_jobs }),
              },
              {
                title: t('projects.members'),
                dataIndex: 'members',
                render: (members: string[]) => (members.length ? members.map((m) => <Tag key={m}>{m}</Tag>) : '—'),
              },
              { title: t('projects.changed'), render: (_, p) => `${formatTime(p.updated_at)} · ${p.updated_by}` },
              ...(isAdmin
                ? [
                    {
                      title: t('common.actions'),
                      render: (_: unknown, p: Project) => (
                        <Space>
                          <Button size="small" onClick={() => setEditing(p)} data-testid={`project-edit-${p.name}`}>
                            {t('projects.edit')}
                          </Button>
                          <Popconfirm title={t('projects.deleteConfirm', { name: p.name })} onConfirm={() => remove.mutate(p.name)} okButtonProps={{ danger: true }}>
                            <Button size="small" danger>
                              {t('common.delete')}
                            </Button>
                          </Popconfirm>
                        </Space>
                      ),
                    },
                  ]
                : []),
            ]}
          />
        </Card>
      </Space>
      {editing && <EditProject project={editing} onClose={() => setEditing(null)} />}
    </>
  );
}
