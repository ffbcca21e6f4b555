import { fireEvent, screen, waitFor } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import App from '../App';
import { apiError, mockApi, renderApp } from './helpers';

const PAGE = { total: 0, page: 1, page_size: 50 };

describe('the console as a whole', () => {
  it('sends a visitor without a session to the login page, then into the overview', async () => {
    let loggedIn = false;
    const { calls } = mockApi({
      'GET /api/v1/auth/me': () => (loggedIn ? { username: 'alice', role: 'user' } : apiError(401, 'unauthenticated', 'log in first')),
      'GET /api/v1/auth/setup-status': { needs_setup: false },
      'POST /api/v1/auth/login': () => {
        loggedIn = true;
        return { user: { username: 'alice', role: 'user' } };
      },
      'GET /api/v1/clusters': { ...PAGE, items: [{ name: 'gpu-a', online: true, summary: { nodes_total: 4, nodes_online: 3, gpus_total: 32, gpus_free: 8, running_jobs: 1 } }] },
      'GET /api/v1/jobs': { ...PAGE, items: [] },
    });
    renderApp('/', <App />);

    fireEvent.change(await screen.findByTestId('login-username'), { target: { value: 'alice' } });
    fireEvent.change(screen.getByTestId('login-password'), { target: { value: 'pw' } });
    fireEvent.click(screen.getByTestId('login-submit'));

    const nodes = await screen.findByTestId('stat-nodes', {}, { timeout: 10000 });
    await waitFor(() => expect(nodes).toHaveTextContent(/3\s*\/ 4/));
    expect(screen.getByTestId('user-menu')).toHaveTextContent('alice');
    // A user (not an admin) has no admin entry in the navigation.
    expect(screen.queryByText('管理')).not.toBeInTheDocument();
    expect(calls.find((c) => c.path === '/api/v1/auth/login')?.body).toEqual({ username: 'alice', password: 'pw' });
  });
});
