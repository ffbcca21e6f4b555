/**
 * The create-job wizard: (1) roles and resources → (2) per-role worker settings → (3) common
 * settings → (4) the server's YAML preview with its errors and warnings → submit.
 *
 * Each step checks its own inputs before moving on; the server's verdict (preview or submit) is
 * mapped back onto the inputs by field path, and clicking a reported field jumps to its step.
 */
import { App, Button, Card, Space, Steps } from 'antd';
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { useTranslation } from 'react-i18next';
import { useNavigate } from 'react-router-dom';
import { ApiError } from '../../api/client';
import { jobsApi } from '../../api/endpoints';
import type { PreviewResult, SpecProblem } from '../../api/types';
import PageTitle from '../../components/PageTitle';
import { useServerText } from '../../i18n/server';
import CommonStep from './wizard/CommonStep';
import PreviewStep from './wizard/PreviewStep';
import RolesStep from './wizard/RolesStep';
import WorkerStep from './wizard/WorkerStep';
import { WizardContext, type WizardApi } from './wizard/context';
import {
  commonStepProblems,
  initialState,
  liveProblems,
  problemsUnder,
  roleIndexOf,
  roleStepProblems,
  serverProblemsFrom,
  stepForField,
  toDocument,
  workerStepProblems,
  type LocalProblem,
  type RoleDraft,
  type WizardState,
} from './wizard/model';

const CHECKS = [roleStepProblems, workerStepProblems, commonStepProblems];

export default function JobWizard() {
  const { t } = useTranslation();
  const { say } = useServerText();
  const navigate = useNavigate();
  const client = useQueryClient();
  const { message } = App.useApp();
  const [state, setState] = useState<WizardState>(initialState);
  const [step, setStep] = useState(0);
  const [shown, setShown] = useState<Set<number>>(new Set());
  const [serverProblems, setServerProblems] = useState<SpecProblem[]>([]);
  const [focusField, setFocusField] = useState<string | null>(null);
  const [activeRole, setActiveRole] = useState<string>('');
  const [preview, setPreview] = useState<PreviewResult | undefined>();
  const top = useRef<HTMLDivElement>(null);

  const set = useCallback((patch: Partial<WizardState>) => setState((s) => ({ ...s, ...patch })), []);
  const setRole = useCallback(
    (id: string, patch: Partial<RoleDraft>) => setState((s) => ({ ...s, roles: s.roles.map((r) => (r.id === id ? { ...r, ...patch } : r)) })),
    [],
  );

  const localProblems: LocalProblem[] = useMemo(
    () => [...liveProblems(state), ...CHECKS.flatMap((check, i) => (shown.has(i) ? check(state) : []))],
    [state, shown],
  );

  const feedback = useCallback(
    (field: string) => {
      const local = problemsUnder(localProblems, field).map((p) => t(p.key, p.values));
      const server = problemsUnder(serverProblems.filter((p) => p.severity !== 'warning'), field).map((p) => say(p));
      const messages = [...new Set([...local, ...server])];
      if (!messages.length) return {};
      return {
        validateStatus: 'error' as const,
        help: (
          <span data-testid={`field-error-${field}`}>
            {messages.map((m, i) => (
              <div key={i}>{m}</div>
            ))}
          </span>
        ),
      };
    },
    [localProblems, serverProblems, t, say],
  );

  const wizard: WizardApi = { state, set, setRole, feedback, focusField };
  const doc = useMemo(() => toDocument(state), [state]);

  const previewMutation = useMutation({
    mutationFn: () => jobsApi.preview(doc),
    onSuccess: (result) => {
      const errors = serverProblemsFrom(result.errors, result.yaml);
      const warnings = serverProblemsFrom(result.warnings, result.yaml).map((w) => ({ ...w, severity: 'warning' as const }));
      setPreview({ ...result, errors, warnings });
      setServerProblems([...errors, ...warnings]);
    },
    onError: (error) => {
      setPreview(undefined);
      if (error instanceof ApiError) setServerProblems(error.fieldErrors().map((p) => ({ ...p, severity: 'error' as const })));
    },
  });
  const submit = useMutation({
    mutationFn: () => jobsApi.submit(doc),
    onSuccess: (job) => {
      void client.invalidateQueries({ queryKey: ['jobs'] });
      void message.success(t('wizard.submitted', { name: job.name }));
      navigate(`/jobs/${encodeURIComponent(job.id)}`);
    },
    onError: (error) => {
      if (error instanceof ApiError) setServerProblems(error.fieldErrors().map((p) => ({ ...p, severity: 'error' as const })));
    },
  });

  const go = (target: number) => {
    // Moving forward checks every step passed over; going back is always allowed.
    if (target > step) {
      for (let i = step; i < Math.min(target, CHECKS.length); i += 1) {
        const problems = CHECKS[i](state);
        if (problems.length) {
          setShown((s) => new Set([...s, i]));
          setStep(i);
          const first = roleIndexOf(problems[0].field);
          if (i === 1 && first !== null) setActiveRole(state.roles[first]?.id ?? '');
          return;
        }
      }
    }
    setFocusField(null);
    setStep(target);
    if (target === 1 && !state.roles.some((r) => r.id === activeRole)) setActiveRole(state.roles[0]?.id ?? '');
    if (target === 3) previewMutation.mutate();
    top.current?.scrollIntoView?.({ block: 'start' });
  };

  const jump = (field: string) => {
    const target = stepForField(field);
    const index = roleIndexOf(field);
    if (index !== null && state.roles[index]) setActiveRole(state.roles[index].id);
    setFocusField(field);
    setStep(target);
  };

  useEffect(() => {
    // After a jump from the preview, bring the outlined (or first erroneous) input into view.
    if (!focusField) return undefined;
    const timer = setTimeout(() => {
      const target = document.querySelector('.field-highlight') ?? document.querySelector('.ant-form-item-has-error');
      target?.scrollIntoView?.({ block: 'center', behavior: 'smooth' });
    }, 80);
    return () => clearTimeout(timer);
  }, [focusField, step, activeRole]);

  const errorsNow = preview?.errors.length ?? 0;
  const steps = [t('wizard.step1'), t('wizard.step2'), t('wizard.step3'), t('wizard.step4')];

  return (
    <WizardContext.Provider value={wizard}>
      <div ref={top} />
      <PageTitle crumbs={[{ label: t('nav.jobs'), to: '/jobs' }, { label: t('jobs.create') }]} title={t('jobs.create')} sub={t('wizard.sub')} />
      <Card>
        <Steps
          data-testid="wizard-steps"
          current={step}
          onChange={go}
          items={steps.map((title, i) => ({
            title,
            status: i === step ? 'process' : CHECKS[i] && shown.has(i) && CHECKS[i](state).length ? 'error' : i < step ? 'finish' : 'wait',
          }))}
          style={{ marginBottom: 24 }}
        />
        <div data-testid={`wizard-step-${step}`}>
          {step === 0 && <RolesStep />}
          {step === 1 && <WorkerStep activeRole={activeRole || state.roles[0]?.id} onRoleChange={setActiveRole} />}
          {step === 2 && <CommonStep />}
          {step === 3 && (
            <PreviewStep doc={doc} preview={preview} loading={previewMutation.isPending} error={previewMutation.error ?? submit.error} onJump={jump} />
          )}
        </div>
        <div className="wizard-actions">
          <Space>
            <Button onClick={() => navigate('/jobs')}>{t('common.cancel')}</Button>
          </Space>
          <Space>
            {step > 0 && (
              <Button onClick={() => go(step - 1)} data-testid="wizard-back">
                {t('wizard.back')}
              </Button>
            )}
            {step === 3 && (
              <Button
                onClick={() => navigate('/jobs/new/yaml', { state: { yaml: preview?.yaml ?? '' } })}
                disabled={!preview?.yaml}
                data-testid="wizard-edit-yaml"
              >
                {t('wizard.editYaml')}
              </Button>
            )}
            {step === 3 && (
              <Button onClick={() => previewMutation.mutate()} loading={previewMutation.isPending}>
                {t('wizard.revalidate')}
              </Button>
            )}
            {step < 3 ? (
              <Button type="primary" onClick={() => go(step + 1)} data-testid="wizard-next">
                {t('wizard.next')}
              </Button>
            ) : (
              <Button
                type="primary"
                onClick={() => submit.mutate()}
                loading={submit.isPending}
                disabled={!preview || errorsNow > 0}
                data-testid="wizard-submit"
              >
                {t('wizard.submit')}
              </Button>
            )}
          </Space>
        </div>
      </Card>
    </WizardContext.Provider>
  );
}
