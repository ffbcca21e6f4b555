/** Step 1: the job's name, a template or a custom layout, and the roles with their node counts and Header. */
import { Button, Card, Form, Input, InputNumber, Radio, Select, Space, Table, Typography } from 'antd';
import { DeleteOutlined, PlusOutlined } from '@ant-design/icons';
import { useQuery } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { jobsApi } from '../../../api/endpoints';
import ApiErrorAlert from '../../../components/ApiErrorAlert';
import { useWizard } from './context';
import { initialState, MAX_NAME_LENGTH, newRole, stateFromTemplate, type RoleDraft } from './model';

export default function RolesStep() {
  const { t, i18n } = useTranslation();
  const { state, set, setRole, feedback } = useWizard();
  const templates = useQuery({ queryKey: ['templates'], queryFn: jobsApi.templates, staleTime: 300_000 });
  const zh = i18n.language === 'zh-CN';

  const chooseTemplate = (id: string) => {
    if (id === '__custom') {
      const fresh = initialState();
      set({ type: 'custom', template: undefined, roles: fresh.roles, headerId: fresh.headerId, rlinfConfig: undefined });
      return;
    }
    const template = templates.data?.find((tpl) => tpl.id === id);
    if (template) set(stateFromTemplate(template, state));
  };
  const addRole = () => {
    const used = new Set(state.roles.map((r) => r.name));
    let n = state.roles.length + 1;
    while (used.has(`role${n}`)) n += 1;
    set({ roles: [...state.roles, newRole(`role${n}`)] });
  };
  const removeRole = (id: string) => {
    const roles = state.roles.filter((r) => r.id !== id);
    set({ roles, headerId: state.headerId === id ? (roles[0]?.id ?? '') : state.headerId });
  };
  const selected = templates.data?.find((tpl) => tpl.id === state.template);

  return (
    <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
      <Card size="small">
        <Form layout="vertical" component="div">
          <Form.Item label={t('wizard.jobName')} required extra={t('wizard.jobNameHint')} {...feedback('metadata.name')}>
            <Input
              value={state.name}
              count={{ show: true, max: MAX_NAME_LENGTH }}
              onChange={(e) => set({ name: e.target.value })}
              placeholder="grpo math 7B"
              data-testid="wizard-name"
              aria-label={t('wizard.jobName')}
            />
          </Form.Item>
          <Form.Item label={t('wizard.template')} extra={zh ? selected?.description_zh : selected?.description_en} {...feedback('spec.template')}>
            <Select
              data-testid="wizard-template"
              aria-label={t('wizard.template')}
              value={state.type === 'template' ? state.template : '__custom'}
              onChange={chooseTemplate}
              loading={templates.isLoading}
              options={[
                { value: '__custom', label: t('wizard.customJob') },
                ...(templates.data ?? []).map((tpl) => ({ value: tpl.id, label: zh ? tpl.title_zh : tpl.title_en })),
              ]}
            />
          </Form.Item>
          <ApiErrorAlert error={templates.error} />
        </Form>
      </Card>
      <Card
        size="small"
        title={t('wizard.roles')}
        extra={
          <Button icon={<PlusOutlined />} onClick={addRole} data-testid="add-role">
            {t('wizard.addRole')}
          </Button>
        }
      >
        <Typography.Paragraph type="secondary">{t('wizard.rolesHint')}</Typography.Paragraph>
        <Radio.Group value={state.headerId} onChange={(e) => set({ headerId: e.target.value as string })} style={{ width: '100%' }} aria-label={t('wizard.header')}>
          <Table<RoleDraft>
            data-testid="roles-table"
            rowKey="id"
            size="small"
            pagination={false}
            dataSource={state.roles}
            columns={[
              {
                title: t('wizard.roleName'),
                render: (_, role, i) => (
                  <Form.Item style={{ margin: 0 }} {...feedback(`spec.tasks[${i}].name`)}>
                    <Input
                      value={role.name}
                      onChange={(e) => setRole(role.id, { name: e.target.value })}
                      aria-label={t('wizard.roleNameOf', { index: i + 1 })}
                      data-testid={`role-name-${i}`}
                      style={{ width: 200 }}
                    />
                  </Form.Item>
                ),
              },
              {
                title: t('wizard.header'),
                width: 110,
                render: (_, role, i) => (
                  <Radio value={role.id} data-testid={`role-header-${i}`} aria-label={t('wizard.headerOf', { name: role.name })}>
                    {t('wizard.headerShort')}
                  </Radio>
                ),
              },
              {
                title: t('wizard.nodeCount'),
                render: (_, role, i) => (
                  <Form.Item style={{ margin: 0 }} {...feedback(`spec.tasks[${i}].replicas`)}>
                    <InputNumber
                      min={1}
                      max={1024}
                      precision={0}
                      value={role.replicas}
                      onChange={(v) => setRole(role.id, { replicas: typeof v === 'number' ? v : 1 })}
                      aria-label={t('wizard.nodeCountOf', { name: role.name })}
                      data-testid={`role-replicas-${i}`}
                    />
                  </Form.Item>
                ),
              },
              {
                title: t('wizard.gpusPerWorker'),
                render: (_, role, i) => (
                  <InputNumber
                    min={0}
                    max={64}
                    precision={0}
                    value={role.gpusPerWorker}
                    onChange={(v) => setRole(role.id, { gpusPerWorker: typeof v === 'number' ? v : 0 })}
                    aria-label={t('wizard.gpusOf', { name: role.name })}
                    data-testid={`role-gpus-${i}`}
                  />
                ),
              },
              {
                title: '',
                width: 60,
                render: (_, role, i) => (
                  <Button
                    type="text"
                    danger
                    icon={<DeleteOutlined />}
                    disabled={state.roles.length <= 1}
                    onClick={() => removeRole(role.id)}
                    aria-label={t('wizard.removeRole', { name: role.name })}
                    data-testid={`remove-role-${i}`}
                  />
                ),
              },
            ]}
          />
        </Radio.Group>
        {feedback('spec.header').help && (
          <div data-testid="header-feedback" style={{ marginTop: 8 }}>
            <Form.Item style={{ margin: 0 }} {...feedback('spec.header')} />
          </div>
        )}
      </Card>
    </Space>
  );
}
