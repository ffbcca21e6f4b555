/**
 * Step 3: settings shared by all roles. The network domain defaults to the first domain by name
 * (the user guide's rule; with none configured the field is left out) — or, when the scheduler chooses a role's
 * cluster, to any domain joining the clusters it chooses, with whether it may span clusters at all (ADR 0026) — SSH keys come from the
 * user's own keys (`none` keeps a single-cluster job out of every domain), and the run script runs on the Header once every Ray node joined.
 */
import { Alert, Checkbox, Col, Form, Input, InputNumber, Row, Select, Typography } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useEffect } from 'react';
import { useTranslation } from 'react-i18next';
import { Link } from 'react-router-dom';
import { domainsApi, keysApi, projectsApi } from '../../../api/endpoints';
import { RESTART_KINDS, type RestartKind } from '../../../api/types';
import { useWizard } from './context';
import { choosesClusters, MAX_BACKOFF_SECONDS, MAX_PROGRESS_DEADLINE_SECONDS, MAX_RESTARTS, MAX_TERMINATION_GRACE_SECONDS, MIN_PROGRESS_DEADLINE_SECONDS } from './model';

/** `spec.networkDomain: none`: a single-cluster job stays out of the default domain (the server's rule). */
const NO_DOMAIN = 'none';
/** No `spec.networkDomain`: a job whose clusters the scheduler chooses may span through any domain joining them. */
const ANY_DOMAIN = '';

export default function CommonStep() {
  const { t } = useTranslation();
  const { state, set, feedback, focusField } = useWizard();
  const domains = useQuery({ queryKey: ['domains'], queryFn: domainsApi.list });
  const keys = useQuery({ queryKey: ['keys', false], queryFn: () => keysApi.list(false) });
  const projects = useQuery({ queryKey: ['projects'], queryFn: projectsApi.list });
  const projectNames = (projects.data?.items ?? []).map((p) => p.name);
  const sortedDomains = [...(domains.data?.items ?? [])].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const firstDomain = sortedDomains[0]?.name;
  // A job whose clusters the scheduler chooses may span through any domain that joins them (ADR 0026): that is its
  // default; a job whose roles all name clusters gets the first domain by name, as the server fills it.
  const anyCluster = choosesClusters(state);
  useEffect(() => {
    if (state.networkDomain === undefined && firstDomain) set({ networkDomain: anyCluster ? ANY_DOMAIN : firstDomain });
  }, [firstDomain, anyCluster, state.networkDomain, set]);
  const outline = (field: string) => (focusField?.startsWith(field) ? 'field-highlight' : undefined);
  const multiCluster = new Set(state.roles.map((r) => r.cluster).filter(Boolean)).size > 1;

  return (
    <Form layout="vertical" component="div">
      <Row gutter={16}>
        <Col span={8}>
          <Form.Item label={t('wizard.header')} required extra={t('wizard.headerHint')} className={outline('spec.header')} {...feedback('spec.header')}>
            <Select
              data-testid="common-header"
              aria-label={t('wizard.header')}
              value={state.headerId}
              onChange={(headerId: string) => set({ headerId })}
              options={state.roles.map((r) => ({ value: r.id, label: `${r.name} (${t('wizard.nodesCount', { count: r.replicas })})` }))}
            />
          </Form.Item>
        </Col>
        <Col span={8}>
          <Form.Item label={t('wizard.networkDomain')} className={outline('spec.networkDomain')} {...feedback('spec.networkDomain')} extra={sortedDomains.length ? t('wizard.domainHint') : undefined}>
            {sortedDomains.length ? (
              <Select
                data-testid="common-domain"
                aria-label={t('wizard.networkDomain')}
                value={state.networkDomain}
                onChange={(networkDomain: string) => set({ networkDomain })}
                options={[
                  ...(anyCluster ? [{ value: ANY_DOMAIN, label: t('wizard.anyDomainOption') }] : []),
                  ...sortedDomains.map((d) => ({ value: d.name, label: `${d.name} (${d.cidr})` })),
                  { value: NO_DOMAIN, label: t('wizard.noDomainOption'), disabled: multiCluster },
                ]}
              />
            ) : (
              <Typography.Text type="secondary" data-testid="common-domain-none">
                {domains.isLoading ? t('common.loading') : t('wizard.noDomain')}
              </Typography.Text>
            )}
          </Form.Item>
        </Col>
        <Col span={projectNames.length ? 4 : 8}>
          <Form.Item label={t('wizard.priority')} extra={t('wizard.priorityHint')} {...feedback('spec.priority')}>
            <InputNumber min={-100} max={100} precision={0} value={state.priority} onChange={(v) => set({ priority: typeof v === 'number' ? v : 0 })} aria-label={t('wizard.priority')} style={{ width: '100%' }} />
          </Form.Item>
        </Col>
        {projectNames.length > 0 && (
          <Col span={4}>
            <Form.Item label={t('wizard.project')} extra={t('wizard.projectHint')} className={outline('spec.project')} {...feedback('spec.project')}>
              <Select
                data-testid="common-project"
                aria-label={t('wizard.project')}
                allowClear
                value={state.project}
                placeholder={projectNames.length === 1 ? projectNames[0] : undefined}
                onChange={(project?: string) => set({ project })}
                options={projectNames.map((name) => ({ value: name, label: name }))}
              />
            </Form.Item>
          </Col>
        )}
      </Row>
      {multiCluster && !sortedDomains.length && !domains.isLoading && (
        <Alert type="warning" showIcon style={{ marginBottom: 16 }} title={t('wizard.multiClusterNoDomain')} />
      )}
      {anyCluster && (
        <Form.Item extra={t('wizard.spanClustersHint')} className={outline('spec.placement')} {...feedback('spec.placement')}>
          <Checkbox data-testid="common-span" checked={state.spanClusters} onChange={(e) => set({ spanClusters: e.target.checked })}>
            {t('wizard.spanClusters')}
          </Checkbox>
        </Form.Item>
      )}
      <Form.Item
        label={t('wizard.sshKeys')}
        className={outline('spec.sshKeys')}
        {...feedback('spec.sshKeys')}
        extra={
          keys.data && keys.data.items.length === 0 ? (
            <span>
              {t('wizard.noKeys')} <Link to="/keys">{t('nav.keys')}</Link>
            </span>
          ) : (
            t('wizard.sshKeysHint')
          )
        }
      >
        <Select
          mode="multiple"
          data-testid="common-keys"
          aria-label={t('wizard.sshKeys')}
          value={state.sshKeys}
          onChange={(sshKeys: string[]) => set({ sshKeys })}
          loading={keys.isLoading}
          options={(keys.data?.items ?? []).map((k) => ({ value: k.name, label: `${k.name} · ${k.key_type} · ${k.fingerprint}` }))}
        />
      </Form.Item>
      <Form.Item label={t('wizard.runScript')} extra={t('wizard.runScriptHint')} className={outline('spec.runScript')} {...feedback('spec.runScript')}>
        <Input.TextArea
          className="mono"
          rows={4}
          value={state.runScript}
          onChange={(e) => set({ runScript: e.target.value })}
          aria-label={t('wizard.runScript')}
          data-testid="common-run-script"
          spellCheck={false}
        />
      </Form.Item>
      <Row gutter={16}>
        <Col span={12}>
          <Form.Item label={t('wizard.tensorboardDir')} className={outline('spec.tensorboardDir')} {...feedback('spec.tensorboardDir')}>
            <Input className="mono" value={state.tensorboardDir} onChange={(e) => set({ tensorboardDir: e.target.value })} placeholder="/data/outputs/tb" aria-label={t('wizard.tensorboardDir')} />
          </Form.Item>
        </Col>
        <Col span={12}>
          <Form.Item label={t('wizard.outputs')} extra={t('wizard.outputsHint')} className={outline('spec.outputs')} {...feedback('spec.outputs')}>
            <Select mode="tags" value={state.outputs} onChange={(outputs: string[]) => set({ outputs })} placeholder="/data/outputs" aria-label={t('wizard.outputs')} tokenSeparators={[',', ' ']} />
          </Form.Item>
        </Col>
      </Row>
      <Row gutter={16}>
        <Col span={6}>
          <Form.Item label={t('wizard.maxRestarts')} extra={t('wizard.maxRestartsHint')} className={outline('spec.restartPolicy.maxRestarts')} {...feedback('spec.restartPolicy.maxRestarts')}>
            <InputNumber
              data-testid="common-max-restarts"
              min={0}
              max={MAX_RESTARTS}
              precision={0}
              value={state.maxRestarts}
              onChange={(v) => set({ maxRestarts: typeof v === 'number' ? v : 0 })}
              aria-label={t('wizard.maxRestarts')}
              style={{ width: '100%' }}
            />
          </Form.Item>
        </Col>
        <Col span={10}>
          <Form.Item label={t('wizard.restartOn')} extra={t('wizard.restartOnHint')} className={outline('spec.restartPolicy.on')} {...feedback('spec.restartPolicy.on')}>
            <Select
              mode="multiple"
              data-testid="common-restart-on"
              aria-label={t('wizard.restartOn')}
              disabled={!state.maxRestarts}
              value={state.restartOn}
              onChange={(restartOn: RestartKind[]) => set({ restartOn })}
              options={RESTART_KINDS.map((kind) => ({ value: kind, label: kind }))}
            />
          </Form.Item>
        </Col>
        <Col span={4}>
          <Form.Item label={t('wizard.restartExitCodes')} extra={t('wizard.restartExitCodesHint')} className={outline('spec.restartPolicy.exitCodes')} {...feedback('spec.restartPolicy.exitCodes')}>
            <Select
              mode="tags"
              data-testid="common-restart-exit-codes"
              aria-label={t('wizard.restartExitCodes')}
              disabled={!state.maxRestarts || !state.restartOn.includes('ExitCode')}
              value={state.restartExitCodes.map(String)}
              onChange={(codes: string[]) => set({ restartExitCodes: codes.map((c) => Number(c.trim())) })}
              tokenSeparators={[',', ' ']}
            />
          </Form.Item>
        </Col>
        <Col span={4}>
          <Form.Item label={t('wizard.restartBackoff')} className={outline('spec.restartPolicy.backoffSeconds')} {...feedback('spec.restartPolicy.backoffSeconds')}>
            <InputNumber
              data-testid="common-restart-backoff"
              min={0}
              max={MAX_BACKOFF_SECONDS}
              precision={0}
              disabled={!state.maxRestarts}
              value={state.restartBackoffSeconds}
              onChange={(v) => set({ restartBackoffSeconds: typeof v === 'number' ? v : 0 })}
              aria-label={t('wizard.restartBackoff')}
              style={{ width: '100%' }}
            />
          </Form.Item>
        </Col>
      </Row>
      <Row gutter={16}>
        <Col span={12}>
          <Form.Item label={t('wizard.progressDeadline')} extra={t('wizard.progressDeadlineHint')} className={outline('spec.progressDeadlineSeconds')} {...feedback('spec.progressDeadlineSeconds')}>
            <InputNumber
              data-testid="common-progress-deadline"
              min={MIN_PROGRESS_DEADLINE_SECONDS}
              max={MAX_PROGRESS_DEADLINE_SECONDS}
              precision={0}
              value={state.progressDeadlineSeconds}
              onChange={(v) => set({ progressDeadlineSeconds: typeof v === 'number' ? v : null })}
              placeholder={t('wizard.notSet')}
              aria-label={t('wizard.progressDeadline')}
              style={{ width: '100%' }}
            />
          </Form.Item>
        </Col>
        <Col span={12}>
          <Form.Item label={t('wizard.terminationGrace')} extra={t('wizard.terminationGraceHint')} className={outline('spec.terminationGracePeriodSeconds')} {...feedback('spec.terminationGracePeriodSeconds')}>
            <InputNumber
              data-testid="common-termination-grace"
              min={0}
              max={MAX_TERMINATION_GRACE_SECONDS}
              precision={0}
              value={state.terminationGracePeriodSeconds}
              onChange={(v) => set({ terminationGracePeriodSeconds: typeof v === 'number' ? v : null })}
              placeholder={t('wizard.notSet')}
              aria-label={t('wizard.terminationGrace')}
              style={{ width: '100%' }}
            />
          </Form.Item>
        </Col>
      </Row>
      <Form.Item label={t('wizard.resumeDir')} extra={t('wizard.resumeDirHint')} className={outline('spec.resume.dir')} {...feedback('spec.resume.dir')}>
        <Input
          className="mono"
          data-testid="common-resume-dir"
          value={state.resumeDir}
          onChange={(e) => set({ resumeDir: e.target.value })}
          placeholder="my-experiment/checkpoints"
          aria-label={t('wizard.resumeDir')}
        />
      </Form.Item>
      <Alert type="warning" showIcon title={t('wizard.noSecrets')} />
    </Form>
  );
}
