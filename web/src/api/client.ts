/**
 * The one place that talks HTTP to the gateway: relative `/api/v1` URLs, the session cookie,
 * and the uniform error body turned into an {@link ApiError} that forms can map onto fields.
 */
import type { ApiErrorBody, ApiErrorDetail, ServerSaid } from './types';

export const API_BASE = '/api/v1';

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string | null;
  readonly details: ApiErrorDetail[];
  /** The error's whole `details` object (e.g. `jobs` of a 409 `key_in_use`). */
  readonly extra: Record<string, unknown>;
  /** The message's catalogue key and params, to say it in the user's language (ADR 0011). */
  readonly said: ServerSaid;

  constructor(
    status: number,
    code: string,
    message: string,
    field: string | null,
    details: ApiErrorDetail[],
    extra: Record<string, unknown> = {},
    said: ServerSaid = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.field = field;
    this.details = details;
    this.extra = extra;
    this.said = said;
  }

  /** Every (field, message) pair the server named, the main one first, without repeats; `said` is
   * the message as the server keyed it (render it with `serverText`). */
  fieldErrors(): Array<{ field: string; message: string; said: ApiErrorDetail }> {
    const out: Array<{ field: string; message: string; said: ApiErrorDetail }> = [];
    const seen = new Set<string>();
    const add = (field: string | null | undefined, said: ApiErrorDetail) => {
      if (!field) return;
      const key = `${field}\u0000${said.message}`;
      if (seen.has(key)) return;
      seen.add(key);
      out.push({ field, message: said.message, said });
    };
    add(this.field, { ...this.said, code: this.code, message: this.message });
    for (const d of this.details) add(d.field ?? null, d);
    return out;
  }
}

/** Called with every 401, so the session layer can send the user to the login page. */
let unauthorizedHandler: (() => void) | null = null;

export function onUnauthorized(handler: (() => void) | null): void {
  unauthorizedHandler = handler;
}

export type Query = Record<string, string | number | boolean | undefined | null>;

export function buildUrl(path: string, query?: Query): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === undefined || value === null || value === '') continue;
    params.set(key, String(value));
  }
  const qs = params.toString();
  return `${API_BASE}${path}${qs ? `?${qs}` : ''}`;
}

export interface RequestOptions {
  query?: Query;
  /** A JSON body. */
  json?: unknown;
  /** A YAML text body (sent as application/yaml). */
  yaml?: string;
  signal?: AbortSignal;
  /** Read the answer as text instead of JSON. */
  text?: boolean;
}

export async function request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: options.text ? 'text/plain, */*' : 'application/json' };
  let body: string | undefined;
  if (options.yaml !== undefined) {
    headers['Content-Type'] = 'application/yaml';
    body = options.yaml;
  } else if (options.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(options.json);
  }
  let response: Response;
  try {
    response = await fetch(buildUrl(path, options.query), {
      method,
      headers,
      body,
      credentials: 'same-origin',
      signal: options.signal,
    });
  } catch (error) {
    if ((error as Error)?.name === 'AbortError') throw error;
    throw new ApiError(0, 'network_error', 'The gateway cannot be reached.', null, []);
  }
  if (!response.ok) throw await toApiError(response);
  if (response.status === 204) return undefined as T;
  if (options.text) return (await response.text()) as T;
  const contentType = response.headers.get('content-type') ?? '';
  if (!contentType.includes('json')) {
    const text = await response.text();
    return (text ? text : undefined) as T;
  }
  return (await response.json()) as T;
}

async function toApiError(response: Response): Promise<ApiError> {
  if (response.status === 401 && unauthorizedHandler) unauthorizedHandler();
  let parsed: ApiErrorBody | null = null;
  try {
    parsed = (await response.json()) as ApiErrorBody;
  } catch {
    parsed = null;
  }
  const error = parsed?.error;
  if (error && typeof error.message === 'string') {
    return new ApiError(
      response.status,
      error.code ?? 'error',
      error.message,
      error.field ?? null,
      Array.isArray(error.details?.errors) ? error.details.errors : [],
      error.details && typeof error.details === 'object' ? error.details : {},
      { message_key: error.message_key ?? null, params: error.params ?? null },
    );
  }
  return new ApiError(response.status, `http_${response.status}`, `HTTP ${response.status} ${response.statusText}`.trim(), null, []);
}

export const api = {
  get: <T>(path: string, query?: Query, signal?: AbortSignal) => request<T>('GET', path, { query, signal }),
  post: <T>(path: string, json?: unknown) => request<T>('POST', path, { json }),
  put: <T>(path: string, json?: unknown) => request<T>('PUT', path, { json }),
  patch: <T>(path: string, json?: unknown) => request<T>('PATCH', path, { json }),
  del: <T>(path: string, query?: Query) => request<T>('DELETE', path, { query }),
};
