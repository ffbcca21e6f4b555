/**
 * Step 4: the YAML exactly as the server will store it (`POST /jobs:preview`), the server's errors
 * and warnings (field + message, each a link back to its input), where the scheduler would place the job now and
 * why (or why it would wait; ADR 0026), the workers per cluster and the user guide's checklist.
 */
import { Alert, Button, Card, Col, List, Row, Space, Spin, Tag, Typography } from 'antd';
import { CheckCircleTwoTone, CloseCircleTwoTone } from '@ant-design/icons';
import { useTranslation } from 'react-i18next';
import type { AgentPlan, JobDocument, PreviewResult, SpecProblem } from '../../../api/types';
import ApiErrorAlert from '../../../components/ApiErrorAlert';
import { useServerText } from '../../../i18n/server';
import { imageProblem } from './model';

function ProblemList({ title, problems, type, onJump }: { title: string; problems: SpecProblem[]; type: 'error' | 'warning'; onJump: (field: string) => void }) {
  const { t } = useTranslation();
  const { say } = useServerText();
  if (!problems.length) return null;
  return (
    <Alert
      type={type}
      showIcon
      data-testid={`preview-${type}s`}
      title={title}
      description={
        <List
          size="small"
          dataSource={problems}
          renderItem={(p) => (
            <List.Item>
              <Space wrap>
                {p.field ? (
                  <Button type="link" size="small" onClick={() => onJump(p.field)} className="mono" style={{ padding: 0 }}>
                    {p.field}
                  </Button>
                ) : (
                  <Tag>{t('wizard.wholeDocument')}</Tag>
                )}
                <span>{say(p)}</span>
                {p.line ? <Tag>{t('wizard.line', { line: p.line })}</Tag> : null}
              </Space>
            </List.Item>
          )}
        />
      }
    />
  );
}

/**
 * Where the scheduler would place the job now and why (ADR 0026) — "fits on north alone"; "no single cluster fits
 * …: actor → north, rollout → south, 3 ms apart, through network domain lab" — or why it would wait.
 */
function LayoutCard({ preview }: { preview: PreviewResult }) {
  const { t } = useTranslation();
  const { sayAll } = useServerText();
  const { layout, pending } = preview;
  if (!layout && !pending) return null;
  return (
    <Card size="small" title={t('wizard.layout')} data-testid="preview-layout">
      {layout ? (
        <Space orientation="vertical" style={{ width: '100%' }}>
          <Typography.Text data-testid="preview-layout-said">{sayAll(layout.parts, layout.message)}</Typography.Text>
          <Space wrap>
            {layout.roles.map((r) => (
              <Tag key={r.role} className="mono">
                {r.role} → {r.clusters.join(' + ')}
              </Tag>
            ))}
            {layout.domain ? <Tag color="purple">{t('wizard.layoutDomain', { domain: layout.domain })}</Tag> : null}
          </Space>
        </Space>
      ) : (
        <Alert type="warning" showIcon data-testid="preview-layout-waits" title={t('wizard.layoutWaits')} description={sayAll(pending?.parts, pending?.message ?? '')} />
      )}
    </Card>
  );
}

function PlanCard({ plan }: { plan: AgentPlan[] }) {
  const { t } = useTranslation();
  if (!plan.length) return null;
  return (
    <Card size="small" title={t('wizard.plan')} data-testid="preview-plan">
      <Space orientation="vertical" style={{ width: '100%' }}>
        {plan.map((p) => (
          <div key={p.cluster}>
            <Space wrap>
              <strong>{p.cluster || t('wizard.anyCluster')}</strong>
              {!p.cluster ? null : !p.known ? <Tag color="error">{t('wizard.planUnknown')}</Tag> : !p.online ? <Tag color="warning">{t('common.offline')}</Tag> : null}
              <Typography.Text type="secondary">{t('wizard.planTotals', { workers: p.workers.length, gpus: p.gpus })}</Typography.Text>
            </Space>
            <div>
              {p.workers.map((w) => (
                <Tag key={`${w.role}-${w.index}`} color={w.is_header ? 'blue' : undefined} className="mono">
                  #{w.rank} {w.role}-{w.index} · {w.gpus} GPU
                </Tag>
              ))}
            </div>
          </div>
        ))}
      </Space>
    </Card>
  );
}

function Check({ ok, children }: { ok: boolean; children: React.ReactNode }) {
  return (
    <div>
      {ok ? <CheckCircleTwoTone twoToneColor="#52c41a" /> : <CloseCircleTwoTone twoToneColor="#ff4d4f" />} {children}
    </div>
  );
}

export default function PreviewStep({
  doc,
  preview,
  loading,
  error,
  onJump,
}: {
  doc: JobDocument;
  preview: PreviewResult | undefined;
  loading: boolean;
  error: unknown;
  onJump: (field: string) => void;
}) {
  const { t } = useTranslation();
  const header = doc.spec.tasks.find((r) => r.name === doc.spec.header);
  const workers = doc.spec.tasks.reduce((n, r) => n + (r.replicas ?? 0), 0);
  const gpus = doc.spec.tasks.reduce((n, r) => n + (r.replicas ?? 0) * (r.gpusPerWorker ?? 0), 0);
  return (
    <Spin spinning={loading}>
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <ApiErrorAlert error={error} />
        {preview && (
          <>
            {preview.errors.length === 0 ? (
              <Alert type="success" showIcon title={t('wizard.previewOk')} data-testid="preview-ok" />
            ) : null}
            <ProblemList title={t('wizard.previewErrors', { count: preview.errors.length })} problems={preview.errors} type="error" onJump={onJump} />
            <ProblemList title={t('wizard.previewWarnings', { count: preview.warnings.length })} problems={preview.warnings} type="warning" onJump={onJump} />
          </>
        )}
        <Row gutter={16}>
          <Col span={16}>
            <Card size="small" title={t('wizard.yaml')} extra={preview?.yaml && <Typography.Text copyable={{ text: preview.yaml }} />}>
              {preview && !preview.yaml ? (
                <Alert type="info" showIcon title={t('wizard.yamlHidden')} />
              ) : (
                <pre className="yaml-view mono" data-testid="preview-yaml">
                  {preview?.yaml ?? ''}
                </pre>
              )}
            </Card>
          </Col>
          <Col span={8}>
            <Space orientation="vertical" style={{ width: '100%' }}>
            <Card size="small" title={t('wizard.checklist')} data-testid="preview-checklist">
              <Space orientation="vertical">
                <Check ok={doc.spec.tasks.length > 0}>{t('wizard.checkTasks', { count: doc.spec.tasks.length })}</Check>
                <Check ok={Boolean(header) && header?.replicas === 1}>{t('wizard.checkHeader', { name: doc.spec.header ?? '—' })}</Check>
                <Check ok={doc.spec.tasks.every((r) => !imageProblem(r.image))}>{t('wizard.checkImages')}</Check>
                <Check ok={!preview || Boolean(preview.layout)}>{preview?.layout ? t('wizard.checkPlaced') : t('wizard.checkWaits')}</Check>
                <Check ok={!preview || preview.errors.every((e) => !/secret|password|token|private/i.test(e.code ?? ''))}>{t('wizard.checkSecrets')}</Check>
                <Typography.Text type="secondary">{t('wizard.totals', { workers, gpus })}</Typography.Text>
              </Space>
            </Card>
            {preview && <LayoutCard preview={preview} />}
            {Array.isArray(preview?.plan) && <PlanCard plan={preview.plan as AgentPlan[]} />}
            </Space>
          </Col>
        </Row>
      </Space>
    </Spin>
  );
}
