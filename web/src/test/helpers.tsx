/**
 * Test helpers: render a page with the console's real providers around it, and a fake `fetch`
 * that answers gateway routes from a table and records every request it saw.
 */
import { render } from '@testing-library/react';
import { StyleProvider } from '@ant-design/cssinjs';
import { QueryClient } from '@tanstack/react-query';
import type { ReactElement } from 'react';
import { MemoryRouter, Route, Routes } from 'react-router-dom';
import { vi } from 'vitest';
import Root from '../Root';
import { ME_KEY } from '../auth';
import type { User } from '../api/types';

export interface Reply {
  status?: number;
  body?: unknown;
}

export type Handler = (request: { url: URL; method: string; body: unknown }) => Reply | unknown;

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  body: unknown;
}

/** Replaces `fetch`: `routes` maps "METHOD /api/v1/path" to a handler or a fixed JSON body. */
export function mockApi(routes: Record<string, Handler | unknown>) {
  const calls: RecordedRequest[] = [];
  const fetchMock = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = new URL(String(input), 'http://console.test');
    const method = (init?.method ?? 'GET').toUpperCase();
    let body: unknown = init?.body;
    if (typeof body === 'string' && String((init?.headers as Record<string, string>)?.['Content-Type']).includes('json')) {
      body = JSON.parse(body);
    }
    calls.push({ method, path: url.pathname, query: url.searchParams, body });
    const route = routes[`${method} ${url.pathname}`];
    if (route === undefined) {
      return new Response(JSON.stringify({ error: { code: 'not_found', message: `no fake for ${method} ${url.pathname}` } }), {
        status: 404,
        headers: { 'Content-Type': 'application/json' },
      });
    }
    const result = typeof route === 'function' ? (route as Handler)({ url, method, body }) : route;
    // A Reply has a numeric status; anything else (a job has `status: "Running"`) is a JSON body.
    const isReply = Boolean(result) && typeof result === 'object' && typeof (result as Reply).status === 'number';
    const reply: Reply = isReply ? (result as Reply) : { body: result };
    return new Response(reply.body === undefined ? null : JSON.stringify(reply.body), {
      status: reply.status ?? 200,
      headers: { 'Content-Type': 'application/json' },
    });
  });
  vi.stubGlobal('fetch', fetchMock);
  return { calls, fetchMock };
}

export function apiError(status: number, code: string, message: string, field?: string, details?: unknown[]): Reply {
  return { status, body: { error: { code, message, field: field ?? null, ...(details ? { details: { errors: details } } : {}) } } };
}

/** The whole console (routes, session, lazy pages) at `route`, with no session yet. */
export function renderApp(route: string, app: ReactElement) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false }, mutations: { retry: false } } });
  return render(
    <StyleProvider mock="server">
      <Root client={client}>
        <MemoryRouter initialEntries={[route]}>{app}</MemoryRouter>
      </Root>
    </StyleProvider>,
  );
}

export function renderPage(
  ui: ReactElement,
  { route = '/', path = '*', user = { username: 'alice', role: 'admin' } as User | null } = {},
) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false, staleTime: Infinity }, mutations: { retry: false } } });
  client.setQueryData(ME_KEY, user);
  // Styles are computed but not inserted into jsdom: its getComputedStyle walks every rule and
  // Ant Design's rules make it slow, while no test here depends on computed styles.
  const result = render(
    <StyleProvider mock="server">
      <Root client={client}>
        <MemoryRouter initialEntries={[route]}>
          <Routes>
            <Route path={path} element={ui} />
          </Routes>
        </MemoryRouter>
      </Root>
    </StyleProvider>,
  );
  return { ...result, client };
}

export const PUBLIC_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINuVu9F8v4evcQ2TbzRGt+51ATETRuSZ7SCn+YJz0aY9 alice@laptop';
export const PUBLIC_KEY_FINGERPRINT = 'SHA256:ixwYd2/h41GdzUiQ27d2zmvWo6rUGRCaG3DfdTZ9OzQ';
/** Armour of an OpenSSH private key around a dummy body (no real key material). */
export const PRIVATE_KEY = [
  '-----BEGIN OPENSSH PRIVATE KEY-----',
  'b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW',
  'QyNTUxOQAAACDUMMYDUMMYDUMMYDUMMYDUMMYDUMMYDUMMYDUMMYDUMMYAAAA=',
  '-----END OPENSSH PRIVATE KEY-----',
].join('\n');
