/**
 * What the server says, in the user's language (ADR 0011). The server sends every sentence for
 * people as its English `message` plus a catalogue `message_key` (or just its `code`) and the
 * `params` it interpolates; the catalogues are copies of `rlark_contracts/messages/*.json` (a
 * Python test keeps them in sync). English shows the server's own sentence; another language renders
 * the key's template with the params, and falls back to the English `message` when the key is unknown
 * here or a placeholder has no value (an older console, a sentence not yet in the catalogue).
 */
import { useMemo } from 'react';
import { useTranslation } from 'react-i18next';
import en from './server/en.json';
import zhCN from './server/zh-CN.json';

export type ServerParams = Record<string, string | number | boolean | null | undefined>;

/** Anything the server wrote for people: an error, a validation problem, a pending clause, a timeline row. */
export interface Said {
  message?: string | null;
  message_key?: string | null;
  code?: string | null;
  params?: ServerParams | null;
}

const CATALOGUES: Record<string, Record<string, string>> = { en, 'zh-CN': zhCN };
const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
const SEPARATOR: Record<string, string> = { 'zh-CN': '；' };

function catalogueOf(lang: string): Record<string, string> | undefined {
  return CATALOGUES[lang] ?? (lang.toLowerCase().startsWith('zh') ? CATALOGUES['zh-CN'] : undefined);
}

/** `template` with each `{name}` replaced by `params[name]`; null when one has no value. */
export function fillTemplate(template: string, params: ServerParams = {}): string | null {
  let missing = false;
  const out = template.replace(PLACEHOLDER, (whole, name: string) => {
    const value = params[name];
    if (value === undefined || value === null) {
      missing = true;
      return whole;
    }
    return String(value);
  });
  return missing ? null : out;
}

/** `said` in `lang`: the catalogue's sentence for its key and params, else the server's message. */
export function serverText(lang: string, said: Said | null | undefined): string {
  if (!said) return '';
  const fallback = said.message ?? '';
  if (lang === 'en' && fallback) return fallback;
  const key = said.message_key ?? said.code;
  const template = key ? catalogueOf(lang)?.[key] ?? CATALOGUES.en[key] : undefined;
  if (template === undefined) return fallback || key || '';
  return fillTemplate(template, said.params ?? {}) ?? (fallback || template);
}

/** Clauses of one explanation (a pending reason), rendered and joined the way `lang` joins clauses. */
export function serverClauses(lang: string, parts: Said[] | null | undefined, fallback = ''): string {
  if (!parts?.length) return fallback;
  if (lang === 'en' && fallback) return fallback;
  return parts.map((part) => serverText(lang, part)).join(SEPARATOR[lang] ?? '; ');
}

/** A job's reason: the server keys it (`reason_said`: a sentence or clauses) when it can (ADR 0011). */
export interface SaidReason {
  reason?: string | null;
  reason_said?: (Said & { parts?: Said[] | null }) | null;
}

export function reasonText(lang: string, job: SaidReason): string {
  const reason = job.reason ?? '';
  const said = job.reason_said;
  if (!said) return reason;
  if (said.parts) return serverClauses(lang, said.parts, reason);
  return serverText(lang, { ...said, message: reason });
}

/** `say(x)` renders a server sentence in the console's current language. */
export function useServerText(): {
  say: (said: Said | null | undefined) => string;
  sayAll: (parts: Said[] | null | undefined, fallback?: string) => string;
  sayReason: (job: SaidReason) => string;
} {
  const { i18n } = useTranslation();
  const lang = i18n.language;
  return useMemo(
    () => ({
      say: (said: Said | null | undefined) => serverText(lang, said),
      sayAll: (parts: Said[] | null | undefined, fallback?: string) => serverClauses(lang, parts, fallback),
      sayReason: (job: SaidReason) => reasonText(lang, job),
    }),
    [lang],
  );
}
