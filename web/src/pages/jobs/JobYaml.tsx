/**
 * Submit a job as YAML: a code editor (CodeMirror 6, YAML mode), "Validate" runs the server's
 * preview and lists errors and warnings with their field and line; "Submit" sends the text as
 * `application/yaml`.
 */
import { Alert, App, Button, Card, List, Space } from 'antd';
import CodeMirror, { type ReactCodeMirrorRef } from '@uiw/react-codemirror';
import { yaml as yamlLanguage } from '@codemirror/lang-yaml';
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useMemo, useRef, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { useLocation, useNavigate } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { jobsApi } from '../../api/endpoints';
import type { SpecProblem } from '../../api/types';
import ApiErrorAlert from '../../components/ApiErrorAlert';
import PageTitle from '../../components/PageTitle';
import { useServerText } from '../../i18n/server';
import { lineOfField } from '../../lib/yamlPath';

const STARTER = `apiVersion: rlark.io/v1
kind: Job
metadata:
  name: my first job
spec:
  type: custom
  header: worker
  sshKeys: []
  runScript: |
    python -m rlinf.run config.yaml
  tasks:
    - name: worker
      cluster: CLUSTER_NAME
      nodeSelector:
        rlark.io/gpu-model: A100
      replicas: 1
      gpusPerWorker: 8
      image: registry.example.com/rlinf:v0.3.0-cuda12.4
`;

function Problems({ items, type, title, onLine }: { items: SpecProblem[]; type: 'error' | 'warning'; title: string; onLine: (line: number) => void }) {
  const { t } = useTranslation();
  const { say } = useServerText();
  if (!items.length) return null;
  return (
    <Alert
      type={type}
      showIcon
      title={title}
      data-testid={`yaml-${type}s`}
      description={
        <List
          size="small"
          dataSource={items}
          renderItem={(p) => (
            <List.Item>
              <Space wrap>
                {p.line ? (
                  <Button size="small" onClick={() => onLine(p.line as number)} aria-label={t('yaml.goToLine', { line: p.line })}>
                    {t('wizard.line', { line: p.line })}
                  </Button>
                ) : null}
                {p.field ? <code>{p.field}</code> : null}
                <span>{say(p)}</span>
              </Space>
            </List.Item>
          )}
        />
      }
    />
  );
}

export default function JobYaml() {
  const { t } = useTranslation();
  const navigate = useNavigate();
  const location = useLocation();
  const client = useQueryClient();
  const { message } = App.useApp();
  const initial = (location.state as { yaml?: string } | null)?.yaml || STARTER;
  const [text, setText] = useState(initial);
  const [problems, setProblems] = useState<{ errors: SpecProblem[]; warnings: SpecProblem[] } | null>(null);
  const extensions = useMemo(() => [yamlLanguage()], []);
  const editor = useRef<ReactCodeMirrorRef>(null);
  const goToLine = (line: number) => {
    const view = editor.current?.view;
    if (!view) return;
    const target = view.state.doc.line(Math.min(Math.max(line, 1), view.state.doc.lines));
    view.dispatch({ selection: { anchor: target.from, head: target.to }, scrollIntoView: true });
    view.focus();
  };
  // A problem without the server's line gets the line of its field in the text that was sent.
  const located = (sent: string, items: SpecProblem[]) => items.map((p) => ({ ...p, line: p.line ?? (p.field ? lineOfField(sent, p.field) : null) }));
  const fromError = (sent: string) => (error: unknown) => {
    if (error instanceof ApiError) {
      const errors = error.details.length ? error.details.map((d) => ({ ...d, field: d.field ?? '' })) : [{ ...error.said, code: error.code, field: error.field ?? '', message: error.message }];
      setProblems({ errors: located(sent, errors), warnings: [] });
    }
  };
  const validate = useMutation({
    mutationFn: (sent: string) => jobsApi.preview(sent),
    onSuccess: (result, sent) => setProblems({ errors: located(sent, result.errors ?? []), warnings: located(sent, result.warnings ?? []) }),
    onError: (error, sent) => fromError(sent)(error),
  });
  const submit = useMutation({
    mutationFn: (sent: string) => jobsApi.submit(sent),
    onSuccess: (job) => {
      void client.invalidateQueries({ queryKey: ['jobs'] });
      void message.success(t('wizard.submitted', { name: job.name }));
      navigate(`/jobs/${encodeURIComponent(job.id)}`);
    },
    onError: (error, sent) => fromError(sent)(error),
  });
  return (
    <>
      <PageTitle crumbs={[{ label: t('nav.jobs'), to: '/jobs' }, { label: t('jobs.submitYaml') }]} title={t('jobs.submitYaml')} sub={t('yaml.sub')} />
      <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
        <ApiErrorAlert error={validate.error ?? submit.error} />
        {problems && problems.errors.length === 0 && <Alert type="success" showIcon title={t('wizard.previewOk')} data-testid="yaml-ok" />}
        {problems && <Problems onLine={goToLine} items={problems.errors} type="error" title={t('wizard.previewErrors', { count: problems.errors.length })} />}
        {problems && <Problems onLine={goToLine} items={problems.warnings} type="warning" title={t('wizard.previewWarnings', { count: problems.warnings.length })} />}
        <Card size="small">
          <div data-testid="yaml-editor" aria-label={t('yaml.editor')}>
            <CodeMirror ref={editor} value={text} height="520px" extensions={extensions} onChange={(value) => setText(value)} basicSetup={{ lineNumbers: true, foldGutter: true }} />
          </div>
        </Card>
        <Space>
          <Button onClick={() => validate.mutate(text)} loading={validate.isPending} data-testid="yaml-validate">
            {t('yaml.validate')}
          </Button>
          <Button type="primary" onClick={() => submit.mutate(text)} loading={submit.isPending} data-testid="yaml-submit">
            {t('wizard.submit')}
          </Button>
        </Space>
      </Space>
    </>
  );
}
