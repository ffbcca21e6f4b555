/**
 * Node selectors as the console edits them: a list of `key=value` terms, sent to the API as
 * `k=v,k2=v2` and written into the job spec as a mapping.
 */

const KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const VALUE = /^(([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)$/;

export interface SelectorTerm {
  key: string;
  value: string;
}

export function parseTerm(text: string): SelectorTerm | null {
  const index = text.indexOf('=');
  if (index <= 0) return null;
  const key = text.slice(0, index).trim();
  const value = text.slice(index + 1).trim();
  if (!KEY.test(key) || key.length > 316 || !VALUE.test(value) || value.length > 63) return null;
  return { key, value };
}

export function termsToMap(terms: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const term of terms) {
    const parsed = parseTerm(term);
    if (parsed) out[parsed.key] = parsed.value;
  }
  return out;
}

export function mapToTerms(map: Record<string, string> | undefined): string[] {
  return Object.entries(map ?? {}).map(([k, v]) => `${k}=${v}`);
}

export function selectorQuery(terms: string[]): string {
  return terms.filter((t) => parseTerm(t)).join(',');
}
