import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Keys from '../pages/Keys';
import { apiError, mockApi, PRIVATE_KEY, PUBLIC_KEY, PUBLIC_KEY_FINGERPRINT, renderPage } from './helpers';

const EMPTY = { items: [], total: 0, page: 1, page_size: 50 };

function formItemOf(element: HTMLElement): HTMLElement {
  return element.closest('.ant-form-item') as HTMLElement;
}

describe('SSH key form', () => {
  it('refuses a pasted private key with the never-upload message and never sends it', async () => {
    const { calls } = mockApi({ 'GET /api/v1/keys': EMPTY, 'POST /api/v1/keys': { id: 'k1' } });
    renderPage(<Keys />);
    fireEvent.change(screen.getByTestId('key-name'), { target: { value: 'laptop' } });
    const textarea = screen.getByTestId('key-public') as HTMLTextAreaElement;
    fireEvent.change(textarea, { target: { value: PRIVATE_KEY } });

    expect(await screen.findByText(/切勿上传私钥/)).toBeInTheDocument();
    expect(textarea.value).toBe('');
    expect(formItemOf(textarea)).toHaveClass('ant-form-item-has-error');

    fireEvent.click(screen.getByTestId('key-submit'));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const sent = calls.filter((c) => c.method === 'POST');
    expect(sent).toHaveLength(0);
    expect(JSON.stringify(calls)).not.toContain('PRIVATE KEY');
  });

  it('shows the key type, comment and ssh-keygen fingerprint as soon as a public key is pasted', async () => {
    mockApi({ 'GET /api/v1/keys': EMPTY });
    renderPage(<Keys />);
    fireEvent.change(screen.getByTestId('key-public'), { target: { value: PUBLIC_KEY } });
    const ok = await screen.findByTestId('key-feedback-ok');
    expect(ok).toHaveTextContent('ssh-ed25519');
    expect(ok).toHaveTextContent('alice@laptop');
    await waitFor(() => expect(screen.getByTestId('key-feedback-ok')).toHaveTextContent(PUBLIC_KEY_FINGERPRINT));
  });

  it('highlights the field the server names when it refuses the key', async () => {
    const { calls } = mockApi({
      'GET /api/v1/keys': EMPTY,
      'POST /api/v1/keys': apiError(409, 'key_duplicate', 'this key is already registered as "desktop"', 'public_key'),
    });
    renderPage(<Keys />);
    fireEvent.change(screen.getByTestId('key-name'), { target: { value: 'laptop' } });
    fireEvent.change(screen.getByTestId('key-public'), { target: { value: PUBLIC_KEY } });
    fireEvent.click(screen.getByTestId('key-submit'));

    const alert = await screen.findByTestId('api-error');
    expect(alert).toHaveTextContent('this key is already registered as "desktop"');
    expect(screen.getByTestId('api-error-field')).toHaveTextContent('public_key');
    await waitFor(() => expect(formItemOf(screen.getByTestId('key-public'))).toHaveClass('ant-form-item-has-error'));
    await waitFor(() => expect(formItemOf(screen.getByTestId('key-public'))).toHaveTextContent('already registered'));
    expect(formItemOf(screen.getByTestId('key-name'))).not.toHaveClass('ant-form-item-has-error');
    const post = calls.find((c) => c.method === 'POST');
    expect(post?.body).toEqual({ name: 'laptop', public_key: PUBLIC_KEY });
  });

  it('shows the rotation procedure from the user guide', async () => {
    mockApi({ 'GET /api/v1/keys': EMPTY });
    renderPage(<Keys />);
    const guide = screen.getByTestId('rotation-guide');
    expect(guide).toHaveTextContent('添加新公钥');
    expect(guide).toHaveTextContent('更新任务');
    expect(guide).toHaveTextContent('删除旧公钥');
  });
});
