/**
 * Errors from the gateway, shown the same way everywhere: the server's message (in the console's
 * language, from its catalogue key and params — ADR 0011), its field, and any further (field,
 * message) pairs; `applyApiError` also puts them on the matching form items so the offending input is
 * highlighted.
 */
import { Alert } from 'antd';
import type { FormInstance } from 'antd';
import { useTranslation } from 'react-i18next';
import { ApiError } from '../api/client';
import i18n from '../i18n';
import { serverText } from '../i18n/server';

/** Which of `formFields` an API field path refers to (`pod_cidrs[1]` → `pod_cidrs`). */
export function formFieldFor(apiField: string, formFields: readonly string[]): string | null {
  const exact = formFields.find((name) => name === apiField);
  if (exact) return exact;
  const prefix = formFields
    .filter((name) => apiField.startsWith(`${name}.`) || apiField.startsWith(`${name}[`))
    .sort((a, b) => b.length - a.length)[0];
  return prefix ?? null;
}

/** Marks the form items named by `error`; returns the messages per form field it marked. `nested`: the
 *  request's object the form's fields sit in (`quota.` — `quota.clusters.gpu-a` marks `clusters`). */
export function applyApiError(form: FormInstance, error: unknown, formFields: readonly string[], nested = ''): Record<string, string[]> {
  if (!(error instanceof ApiError)) return {};
  const byField = new Map<string, string[]>();
  for (const { field, said } of error.fieldErrors()) {
    const name = formFieldFor(nested && field.startsWith(nested) ? field.slice(nested.length) : field, formFields);
    if (!name) continue;
    byField.set(name, [...(byField.get(name) ?? []), serverText(i18n.language, said)]);
  }
  form.setFields([...byField.entries()].map(([name, errors]) => ({ name, errors })));
  return Object.fromEntries(byField);
}

/** The error for people, in the console's language when the server keyed it. */
export function errorMessage(error: unknown): string {
  if (error instanceof ApiError) return serverText(i18n.language, { ...error.said, code: error.code, message: error.message });
  if (error instanceof Error) return error.message;
  return String(error);
}

export default function ApiErrorAlert({ error, className }: { error: unknown; className?: string }) {
  const { t, i18n: current } = useTranslation();
  if (!error) return null;
  const api = error instanceof ApiError ? error : null;
  const extra = api ? api.details.filter((d) => d.message !== api.message || d.field !== api.field) : [];
  return (
    <Alert
      className={className}
      type="error"
      showIcon
      role="alert"
      data-testid="api-error"
      title={errorMessage(error)}
      description={
        api && (api.field || extra.length > 0) ? (
          <div>
            {api.field && (
              <div data-testid="api-error-field">
                {t('common.field')}: <code>{api.field}</code>
              </div>
            )}
            {extra.length > 0 && (
              <ul className="plain-list">
                {extra.map((d, i) => (
                  <li key={i}>
                    {d.field && <code>{d.field}</code>} {serverText(current.language, d)}
                  </li>
                ))}
              </ul>
            )}
          </div>
        ) : undefined
      }
    />
  );
}
