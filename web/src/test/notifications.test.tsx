import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Notifications from '../pages/Notifications';
import { apiError, mockApi, renderPage } from './helpers';

const ENDPOINT = {
  id: 'e1',
  name: 'team-chat',
  owner: 'alice',
  kind: 'feishu',
  url: 'https://open.feishu.cn/open-apis/bot/v2/hook/abc',
  has_secret: true,
  scope: 'own',
  states: ['Failed', 'Succeeded'],
  job_ids: [],
  language: 'zh-CN',
  created_at: '2026-12-02T01:00:00Z',
};
const LIST = { items: [ENDPOINT], total: 1, page: 1, page_size: 500 };
const DELIVERIES = {
  items: [
    {
      id: 7,
      event_id: 'ev-7',
      job_id: 'j-123',
      to_status: 'Succeeded',
      status: 'delivered',
      attempts: 3,
      next_attempt_at: null,
      last_status_code: 200,
      last_error: '',
      created_at: '2026-12-02T01:00:00Z',
      finished_at: '2026-12-02T01:00:03Z',
      log: [
        { attempt: 1, at: '2026-12-02T01:00:00Z', status_code: 500, error: 'HTTP 500: boom', duration_ms: 12 },
        { attempt: 2, at: '2026-12-02T01:00:01Z', status_code: 500, error: 'HTTP 500: boom', duration_ms: 10 },
        { attempt: 3, at: '2026-12-02T01:00:03Z', status_code: 200, error: '', duration_ms: 9 },
      ],
    },
  ],
  total: 1,
  page: 1,
  page_size: 50,
};

describe('Notifications page', () => {
  it('lists endpoints with their filters and whether they sign, never a secret', async () => {
    mockApi({ 'GET /api/v1/notifications/endpoints': LIST });
    renderPage(<Notifications />);
    const table = await screen.findByTestId('notify-table');
    await waitFor(() => expect(table).toHaveTextContent('team-chat'));
    expect(table).toHaveTextContent('飞书');
    expect(table).toHaveTextContent('我的任务');
    expect(table).toHaveTextContent('是');
  });

  it('sends a new endpoint with its secret and filters, and shows the field the server refuses', async () => {
    const { calls } = mockApi({
      'GET /api/v1/notifications/endpoints': { items: [], total: 0, page: 1, page_size: 500 },
      'POST /api/v1/notifications/endpoints': apiError(422, 'forbidden_address', 'url: 169.254.169.254 is link-local', 'url'),
    });
    renderPage(<Notifications />);
    fireEvent.change(screen.getByTestId('notify-name'), { target: { value: 'ops' } });
    fireEvent.change(screen.getByTestId('notify-url'), { target: { value: 'https://169.254.169.254/x' } });
    fireEvent.change(screen.getByTestId('notify-secret'), { target: { value: 's3cret-value' } });
    fireEvent.click(screen.getByTestId('notify-submit'));

    const alert = await screen.findByTestId('api-error');
    expect(alert).toHaveTextContent('link-local');
    await waitFor(() =>
      expect(screen.getByTestId('notify-url').closest('.ant-form-item')).toHaveClass('ant-form-item-has-error'),
    );
    const post = calls.find((c) => c.method === 'POST');
    expect(post?.body).toEqual({
      name: 'ops',
      kind: 'feishu',
      url: 'https://169.254.169.254/x',
      secret: 's3cret-value',
      scope: 'own',
      states: [],
      job_ids: [],
      language: 'zh-CN',
    });
  });

  it('queues a test and shows the delivery log with every attempt', async () => {
    const { calls } = mockApi({
      'GET /api/v1/notifications/endpoints': LIST,
      'POST /api/v1/notifications/endpoints/e1:test': { status: 202, body: { event_id: 'test-1' } },
      'GET /api/v1/notifications/endpoints/e1/deliveries': DELIVERIES,
    });
    renderPage(<Notifications />);
    fireEvent.click(await screen.findByTestId('notify-test-team-chat'));
    const log = await screen.findByTestId('delivery-log');
    await waitFor(() => expect(within(log).getByTestId('delivery-status')).toHaveTextContent('已送达'));
    expect(log).toHaveTextContent('j-123');
    fireEvent.click(within(log).getByRole('button', { name: /展开|expand/i }));
    const attempts = await within(log).findByTestId('delivery-attempts');
    expect(attempts).toHaveTextContent('HTTP 500: boom');
    expect(attempts).toHaveTextContent('第 3 次');
    expect(calls.some((c) => c.method === 'POST' && c.path.endsWith('e1:test'))).toBe(true);
  });
});
