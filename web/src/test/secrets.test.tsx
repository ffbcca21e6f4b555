import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Secrets from '../pages/Secrets';
import type { Secret } from '../api/types';
import { mockApi, renderPage, type Reply } from './helpers';

const HF_TOKEN: Secret = {
  name: 'hf-token',
  scope: 'user',
  owner: 'alice',
  version: 2,
  created_by: 'alice',
  created_at: '2026-11-30T08:00:00Z',
  updated_by: 'alice',
  updated_at: '2026-12-01T09:30:00Z',
  last_used_at: '2026-12-02T10:15:00Z',
};
const S3: Secret = { ...HF_TOKEN, name: 's3-datasets', version: 1, last_used_at: null };
const TOKEN = 'hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789';

function pageOf(items: Secret[]) {
  return { items, total: items.length, page: 1, page_size: 500 };
}

function formItemOf(element: HTMLElement): HTMLElement {
  return element.closest('.ant-form-item') as HTMLElement;
}

/** A refusal as the keys service words it: English `message`, catalogue key and params (ADR 0011). */
function refusal(status: number, code: string, message: string, field: string, params: Record<string, string>): Reply {
  return { status, body: { error: { code, message, field, message_key: code, params } } };
}

const AS_USER = { user: { username: 'alice', role: 'user' as const } };

describe('secrets page', () => {
  it('lists each secret by name with its version, last update and last use, and never a value', async () => {
    mockApi({ 'GET /api/v1/secrets': pageOf([HF_TOKEN, S3]) });
    renderPage(<Secrets />, AS_USER);
    const table = await screen.findByTestId('secrets-table');
    await within(table).findByText('hf-token');
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(2);
    expect(rows[0]).toHaveTextContent('v2');
    expect(rows[0]).toHaveTextContent('由 alice');
    expect(rows[1]).toHaveTextContent('s3-datasets');
    expect(rows[1]).toHaveTextContent('v1');
    expect(rows[1]).toHaveTextContent('从未');
    // A user manages only their own: no project selector.
    expect(screen.queryByTestId('secrets-scope')).not.toBeInTheDocument();
  });

  it('explains how a job names a secret and the CLI equivalent', async () => {
    mockApi({ 'GET /api/v1/secrets': pageOf([]) });
    renderPage(<Secrets />, AS_USER);
    const help = screen.getByTestId('secrets-help');
    expect(help).toHaveTextContent('secret: hf-token');
    expect(help).toHaveTextContent('secretRef: s3-datasets');
    expect(help).toHaveTextContent('rlark secrets set hf-token --from-stdin');
  });

  it('posts the name and value, then empties the masked value field', async () => {
    const { calls } = mockApi({
      'GET /api/v1/secrets': pageOf([]),
      'POST /api/v1/secrets': { status: 201, body: { ...HF_TOKEN, version: 1, last_used_at: null } },
    });
    renderPage(<Secrets />, AS_USER);
    const value = screen.getByTestId('secret-value') as HTMLTextAreaElement;
    expect(value).toHaveAttribute('autocomplete', 'off');
    expect(value).toHaveAttribute('spellcheck', 'false');
    expect(value).toHaveClass('secret-value');
    fireEvent.change(screen.getByTestId('secret-name'), { target: { value: 'hf-token' } });
    fireEvent.change(value, { target: { value: `${TOKEN}\n` } });
    fireEvent.click(screen.getByTestId('secret-submit'));

    await waitFor(() => expect(calls.filter((c) => c.method === 'POST')).toHaveLength(1));
    // One trailing line break is the paste's, as the CLI reads standard input.
    expect(calls.find((c) => c.method === 'POST')?.body).toEqual({ name: 'hf-token', value: TOKEN });
    await waitFor(() => expect((screen.getByTestId('secret-value') as HTMLTextAreaElement).value).toBe(''));
    expect(await screen.findByText('已添加密钥 hf-token')).toBeInTheDocument();
    expect(document.body.textContent).not.toContain(TOKEN);
  });

  it('says a taken name in the console language, on the name, and does not keep the value', async () => {
    const { calls } = mockApi({
      'GET /api/v1/secrets': pageOf([HF_TOKEN]),
      'POST /api/v1/secrets': refusal(
        409,
        'secret_exists',
        'a secret named hf-token exists: give it a new value with rlark secrets rotate hf-token',
        'name',
        { name: 'hf-token' },
      ),
    });
    renderPage(<Secrets />, AS_USER);
    fireEvent.change(screen.getByTestId('secret-name'), { target: { value: 'hf-token' } });
    fireEvent.change(screen.getByTestId('secret-value'), { target: { value: TOKEN } });
    fireEvent.click(screen.getByTestId('secret-submit'));

    const alert = await screen.findByTestId('api-error');
    expect(alert).toHaveTextContent('名为 hf-token 的密钥已存在：请用 rlark secrets rotate hf-token 为它设置新值');
    await waitFor(() => expect(formItemOf(screen.getByTestId('secret-name'))).toHaveClass('ant-form-item-has-error'));
    expect((screen.getByTestId('secret-value') as HTMLTextAreaElement).value).toBe('');
    expect(calls.filter((c) => c.method === 'POST')).toHaveLength(1);
  });

  it('refuses a name the server would refuse before sending anything', async () => {
    const { calls } = mockApi({ 'GET /api/v1/secrets': pageOf([]) });
    renderPage(<Secrets />, AS_USER);
    fireEvent.change(screen.getByTestId('secret-name'), { target: { value: 'HF_TOKEN' } });
    fireEvent.change(screen.getByTestId('secret-value'), { target: { value: TOKEN } });
    fireEvent.click(screen.getByTestId('secret-submit'));
    expect(await screen.findByText(/1-63 个小写字母/)).toBeInTheDocument();
    expect(calls.filter((c) => c.method === 'POST')).toHaveLength(0);
  });

  it('rotates a secret with a new value, its next version', async () => {
    const { calls } = mockApi({
      'GET /api/v1/secrets': pageOf([HF_TOKEN]),
      'PUT /api/v1/secrets/hf-token': { ...HF_TOKEN, version: 3 },
    });
    renderPage(<Secrets />, AS_USER);
    fireEvent.click(await screen.findByTestId('rotate-hf-token'));
    const dialog = await screen.findByRole('dialog');
    expect(dialog).toHaveTextContent('版本 3');
    const value = within(dialog).getByTestId('rotate-value') as HTMLTextAreaElement;
    expect(value).toHaveAttribute('autocomplete', 'off');
    fireEvent.change(value, { target: { value: 'hf_new-value' } });
    fireEvent.click(screen.getByTestId('rotate-submit'));

    await waitFor(() => expect(calls.filter((c) => c.method === 'PUT')).toHaveLength(1));
    const put = calls.find((c) => c.method === 'PUT');
    expect(put?.path).toBe('/api/v1/secrets/hf-token');
    expect(put?.body).toEqual({ value: 'hf_new-value' });
    expect(put?.query.has('project')).toBe(false);
    expect(await screen.findByText('密钥 hf-token 已更新为版本 3')).toBeInTheDocument();
  });

  it('deletes only after a confirmation that says jobs naming it cannot start new workers', async () => {
    const { calls } = mockApi({
      'GET /api/v1/secrets': pageOf([HF_TOKEN]),
      'DELETE /api/v1/secrets/hf-token': { status: 204 },
    });
    renderPage(<Secrets />, AS_USER);
    fireEvent.click(await screen.findByTestId('delete-hf-token'));
    expect(await screen.findByText('删除密钥 hf-token？')).toBeInTheDocument();
    expect(screen.getByTestId('secret-delete-text')).toHaveTextContent('引用它的任务将无法再启动新的 Worker');
    expect(calls.filter((c) => c.method === 'DELETE')).toHaveLength(0);

    fireEvent.click(screen.getByTestId('secret-delete-confirm'));
    await waitFor(() => expect(calls.filter((c) => c.method === 'DELETE')).toHaveLength(1));
    expect(calls.find((c) => c.method === 'DELETE')?.path).toBe('/api/v1/secrets/hf-token');
  });

  it("lets an admin manage a project's secrets: listed, added and rotated with ?project=", async () => {
    const vision = { ...HF_TOKEN, name: 'wandb-key', scope: 'project' as const, owner: 'vision' };
    const { calls } = mockApi({
      'GET /api/v1/projects': { items: [{ name: 'vision', members: ['alice'] }] },
      'GET /api/v1/secrets': ({ url }: { url: URL }) => pageOf(url.searchParams.get('project') === 'vision' ? [vision] : [HF_TOKEN]),
      'POST /api/v1/secrets': { status: 201, body: vision },
      'PUT /api/v1/secrets/wandb-key': { ...vision, version: 3 },
    });
    renderPage(<Secrets />);
    await within(screen.getByTestId('secrets-table')).findByText('hf-token');

    fireEvent.mouseDown(within(screen.getByTestId('secrets-scope')).getByRole('combobox'));
    fireEvent.click(await screen.findByText('项目 vision'));
    await within(screen.getByTestId('secrets-table')).findByText('wandb-key');
    expect(screen.getByText('项目 vision 的密钥')).toBeInTheDocument();
    expect(calls.some((c) => c.path === '/api/v1/secrets' && c.query.get('project') === 'vision')).toBe(true);

    fireEvent.change(screen.getByTestId('secret-name'), { target: { value: 'wandb-key' } });
    fireEvent.change(screen.getByTestId('secret-value'), { target: { value: 'wandb-value' } });
    fireEvent.click(screen.getByTestId('secret-submit'));
    await waitFor(() => expect(calls.filter((c) => c.method === 'POST')).toHaveLength(1));
    expect(calls.find((c) => c.method === 'POST')?.body).toEqual({ name: 'wandb-key', value: 'wandb-value', project: 'vision' });

    fireEvent.click(screen.getByTestId('rotate-wandb-key'));
    fireEvent.change(await screen.findByTestId('rotate-value'), { target: { value: 'wandb-next' } });
    fireEvent.click(screen.getByTestId('rotate-submit'));
    await waitFor(() => expect(calls.filter((c) => c.method === 'PUT')).toHaveLength(1));
    expect(calls.find((c) => c.method === 'PUT')?.query.get('project')).toBe('vision');
  });
});
