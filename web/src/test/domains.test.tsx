import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import Domains from '../pages/Domains';
import { mockApi, renderPage } from './helpers';

const LIST = { items: [{ name: 'dom-a', cidr: '10.100.0.0/16', capacity: 65024, allocated: 12 }], total: 1, page: 1, page_size: 50 };

describe('network domain form', () => {
  it('shows the server conflict message under the CIDR as the user types, and blocks create', async () => {
    const { calls } = mockApi({
      'GET /api/v1/domains': LIST,
      'POST /api/v1/domains:check': ({ body }: { body: unknown }) => {
        const cidr = (body as { cidr: string }).cidr;
        return cidr === '10.244.0.0/16'
          ? { ok: false, conflicts: [{ kind: 'pod_cidr', cluster: 'gpu-a', cidr: '10.244.0.0/16', message: 'overlaps the pod CIDR 10.244.0.0/16 of cluster gpu-a' }] }
          : { ok: true, conflicts: [] };
      },
    });
    renderPage(<Domains />, { user: { username: 'root', role: 'admin' } });
    const input = screen.getByTestId('domain-cidr');
    fireEvent.change(input, { target: { value: '10.244.0.0/16' } });

    const conflict = await screen.findByTestId('cidr-conflict', {}, { timeout: 3000 });
    expect(conflict).toHaveTextContent('overlaps the pod CIDR 10.244.0.0/16 of cluster gpu-a');
    expect(screen.getByTestId('domain-cidr').closest('.ant-form-item')).toHaveClass('ant-form-item-has-error');
    expect(screen.getByTestId('domain-cidr')).toBe(input);
    expect(screen.getByTestId('domain-submit')).toBeDisabled();
    const checks = calls.filter((c) => c.path === '/api/v1/domains:check');
    expect(checks.map((c) => c.body)).toEqual([{ cidr: '10.244.0.0/16' }]);

    fireEvent.change(input, { target: { value: '10.100.0.0/16' } });
    expect(await screen.findByTestId('cidr-ok', {}, { timeout: 3000 })).toBeInTheDocument();
    await waitFor(() => expect(screen.getByTestId('domain-submit')).toBeEnabled());
  });

  it('shows why the server refuses the range itself', async () => {
    mockApi({
      'GET /api/v1/domains': LIST,
      'POST /api/v1/domains:check': { ok: false, cidr: null, capacity: null, conflicts: [], error: { code: 'cidr_not_private', message: '8.8.8.0/24 is not a private range', field: 'cidr' } },
    });
    renderPage(<Domains />);
    fireEvent.change(screen.getByTestId('domain-cidr'), { target: { value: '8.8.8.0/24' } });
    expect(await screen.findByTestId('cidr-conflict', {}, { timeout: 3000 })).toHaveTextContent('8.8.8.0/24 is not a private range');
    expect(screen.getByTestId('domain-submit')).toBeDisabled();
  });

  it('does not ask the server about text that is not a CIDR', async () => {
    const { calls } = mockApi({ 'GET /api/v1/domains': LIST, 'POST /api/v1/domains:check': { ok: true, conflicts: [] } });
    renderPage(<Domains />);
    fireEvent.change(screen.getByTestId('domain-cidr'), { target: { value: '10.100.0/33' } });
    expect(await screen.findByText(/请输入 IPv4 CIDR/)).toBeInTheDocument();
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(calls.some((c) => c.path === '/api/v1/domains:check')).toBe(false);
  });

  it('lists domains with their utilisation', async () => {
    mockApi({ 'GET /api/v1/domains': LIST });
    renderPage(<Domains />);
    const table = await screen.findByTestId('domains-table');
    await waitFor(() => expect(table).toHaveTextContent('dom-a'));
    expect(table).toHaveTextContent('已分配 12 / 65024 个地址');
  });

  it('shows each tunnel of a domain with its state, RTT, bytes and last error when expanded', async () => {
    mockApi({
      'GET /api/v1/domains': LIST,
      'GET /api/v1/domains/dom-a': {
        ...LIST.items[0],
        tunnels: { clusters: ['alpha', 'beta', 'gamma'], links: [{ a: 'alpha', b: 'beta' }, { a: 'alpha', b: 'gamma', via: 'beta' }] },
        tunnel_states: [
          { cluster: 'alpha', peer: 'beta', state: 'up', since: '2026-11-29T10:00:00Z', rtt_ms: 0.42, bytes_sent: 104857600, bytes_received: 2048, last_error: '', reported_at: '2026-11-29T10:00:05Z' },
          { cluster: 'beta', peer: 'alpha', state: 'down', since: '2026-11-29T10:00:03Z', rtt_ms: null, bytes_sent: 10, bytes_received: 20, last_error: 'no answer from alpha for 2.5s', reported_at: '2026-11-29T10:00:05Z' },
        ],
      },
    });
    renderPage(<Domains />);
    const table = await screen.findByTestId('domains-table');
    await waitFor(() => expect(table).toHaveTextContent('dom-a'));
    fireEvent.click(table.querySelector('button.ant-table-row-expand-icon') as HTMLElement);
    const tunnels = await screen.findByTestId('domain-tunnels-dom-a');
    await waitFor(() => expect(tunnels).toHaveTextContent('no answer from alpha for 2.5s'));
    expect(tunnels).toHaveTextContent('0.42 ms');
    expect(screen.getByTestId('domain-links')).toHaveTextContent('alpha ↔ gamma，经 beta 中继');
    expect(screen.getAllByTestId('tunnel-state').map((e) => e.textContent)).toEqual(['正常', '中断']);
  });
});
