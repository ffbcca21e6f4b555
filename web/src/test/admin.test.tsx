import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { RegisterClusterForm } from '../pages/admin/Admin';
import { apiError, mockApi, renderPage } from './helpers';

describe('register cluster', () => {
  it('highlights the field an API error names, even an indexed one', async () => {
    mockApi({
      'GET /api/v1/clusters': { items: [], total: 0, page: 1, page_size: 50 },
      'POST /api/v1/clusters': apiError(422, 'cidr_invalid', 'pod_cidrs[0]: 10.244.0.0/33 is not a valid CIDR', 'pod_cidrs[0]'),
    });
    renderPage(<RegisterClusterForm />);
    fireEvent.change(screen.getByTestId('cluster-name'), { target: { value: 'gpu-a' } });
    fireEvent.click(screen.getByTestId('register-cluster-submit'));
    const item = screen.getByTestId('cluster-pod-cidrs').closest('.ant-form-item') as HTMLElement;
    await waitFor(() => expect(item).toHaveClass('ant-form-item-has-error'));
    // antd renders the field's help text through a motion list a tick after the error class: wait for it too.
    expect(await within(item).findByText('pod_cidrs[0]: 10.244.0.0/33 is not a valid CIDR')).toBeInTheDocument();
    expect(screen.getByTestId('api-error-field')).toHaveTextContent('pod_cidrs[0]');
    expect(screen.getByTestId('cluster-name').closest('.ant-form-item')).not.toHaveClass('ant-form-item-has-error');
  });

  it('shows the agent credential once, with a warning', async () => {
    const { calls } = mockApi({
      'POST /api/v1/clusters': { name: 'gpu-b', online: false, agent_credential: 'rlk_agent_secret_value' },
    });
    renderPage(<RegisterClusterForm />);
    fireEvent.change(screen.getByTestId('cluster-name'), { target: { value: 'gpu-b' } });
    fireEvent.click(screen.getByTestId('register-cluster-submit'));
    expect(await screen.findByTestId('agent-credential')).toHaveTextContent('rlk_agent_secret_value');
    expect(screen.getByText(/只显示这一次/)).toBeInTheDocument();
    expect(calls.find((c) => c.method === 'POST')?.body).toEqual({
      name: 'gpu-b',
      runtime: 'kubernetes',
      pod_cidrs: [],
      service_cidrs: [],
      labels: {},
    });
  });
});
