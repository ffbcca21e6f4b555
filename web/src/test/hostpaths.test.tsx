/** A cluster's hostPath policy on its page: everyone sees the allowed host directories; admins replace
 * the list, and a refused entry is shown with the server's message naming it, nothing changed. */
import { cleanup, fireEvent, screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import i18n from '../i18n';
import ClusterDetail from '../pages/ClusterDetail';
import JobWizard from '../pages/jobs/JobWizard';
import { apiError, mockApi, renderPage } from './helpers';

const SUMMARY = {
  nodes_total: 1, nodes_online: 1, nodes_offline: 0, online_rate: 1,
  gpus_total: 0, gpus_allocatable: 0, gpus_allocated: 0, gpus_allocated_foreign: 0, gpus_free: 0,
  running_jobs: 0, running_workers: 0,
};
const CLUSTER = { name: 'lab', online: true, runtime: 'local', summary: SUMMARY };
const ROUTE = { route: '/clusters/lab', path: '/clusters/:name' };

function routes(allow: string[], put?: (body: { allow: string[] }) => unknown) {
  return {
    'GET /api/v1/clusters/lab': { ...CLUSTER, hostpath_allow: allow },
    'GET /api/v1/nodes': { total: 0, page: 1, page_size: 20, items: [] },
    'GET /api/v1/labels': { items: [] },
    'GET /api/v1/clusters/lab/hostpath-policy': { cluster: 'lab', allow },
    ...(put ? { 'PUT /api/v1/clusters/lab/hostpath-policy': ({ body }: { body: unknown }) => put(body as { allow: string[] }) } : {}),
  };
}

describe('hostPath policy', () => {
  it('a user sees the allowed directories and cannot edit them', async () => {
    await i18n.changeLanguage('en');
    mockApi(routes(['/data/datasets', '/scratch']));
    renderPage(<ClusterDetail />, { ...ROUTE, user: { username: 'bob', role: 'user' } });
    const card = await screen.findByTestId('hostpath-policy');
    expect(await within(card).findByText('/data/datasets')).toBeInTheDocument();
    expect(within(card).getByText('/scratch')).toBeInTheDocument();
    expect(screen.queryByTestId('hostpath-edit')).not.toBeInTheDocument();
  });

  it('a cluster without a policy says that no host directory can be mounted (in Chinese too)', async () => {
    await i18n.changeLanguage('zh-CN');
    mockApi(routes([]));
    renderPage(<ClusterDetail />, ROUTE);
    expect(await screen.findByTestId('hostpath-none')).toHaveTextContent('无：此集群上的任务不能挂载主机目录。');
    await i18n.changeLanguage('en');
    expect(await screen.findByTestId('hostpath-none')).toHaveTextContent('None: jobs on this cluster cannot mount host directories.');
  });

  it('an admin replaces the list, one prefix per line, and sees what the server stored', async () => {
    await i18n.changeLanguage('en');
    const { calls } = mockApi(routes([], (body) => ({ cluster: 'lab', allow: [...body.allow].sort() })));
    renderPage(<ClusterDetail />, ROUTE);
    fireEvent.click(await screen.findByTestId('hostpath-edit'));
    fireEvent.change(screen.getByTestId('hostpath-input'), { target: { value: ' /srv/x \n\n/data/datasets\n' } });
    fireEvent.click(screen.getByTestId('hostpath-save'));
    const card = screen.getByTestId('hostpath-policy');
    expect(await within(card).findByText('/data/datasets')).toBeInTheDocument();
    expect(within(card).getByText('/srv/x')).toBeInTheDocument();
    const put = calls.find((c) => c.method === 'PUT');
    expect(put?.body).toEqual({ allow: ['/srv/x', '/data/datasets'] });
  });

  it('a refused entry shows the server message naming it and keeps the draft', async () => {
    await i18n.changeLanguage('en');
    const message = 'hostpath_allow[0]: /etc overlaps the protected host path /etc, which no policy can allow';
    mockApi(routes(['/scratch'], () => apiError(422, 'hostpath_policy_invalid', message, 'hostpath_allow[0]')));
    renderPage(<ClusterDetail />, ROUTE);
    fireEvent.click(await screen.findByTestId('hostpath-edit'));
    fireEvent.change(screen.getByTestId('hostpath-input'), { target: { value: '/etc' } });
    fireEvent.click(screen.getByTestId('hostpath-save'));
    await waitFor(() => expect(screen.getByTestId('hostpath-policy')).toHaveTextContent(message));
    expect(screen.getByTestId('hostpath-input')).toHaveValue('/etc');
  });
});

describe('hostPath policy in the job wizard', () => {
  it('a hostPath mount shows which directories the role cluster allows, and when it allows none', async () => {
    await i18n.changeLanguage('en');
    let allow = ['/data/datasets'];
    mockApi({
      'GET /api/v1/templates': { items: [] },
      'GET /api/v1/clusters': { total: 1, page: 1, page_size: 50, items: [CLUSTER] },
      'GET /api/v1/domains': { total: 0, page: 1, page_size: 50, items: [] },
      'GET /api/v1/keys': { total: 0, page: 1, page_size: 50, items: [] },
      'GET /api/v1/labels': { items: [] },
      'GET /api/v1/clusters/lab/match': { cluster: 'lab', total: 1, matching: 1, ready: 1, schedulable: 1, with_free_gpus: 1, nodes: [] },
      'GET /api/v1/clusters/lab/hostpath-policy': () => ({ cluster: 'lab', allow }),
    });
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'job' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/lab ·/));
    expect(screen.queryByTestId('hostpath-hint')).not.toBeInTheDocument();
    fireEvent.click(screen.getByTestId('add-mount-0'));
    expect(await screen.findByTestId('hostpath-hint')).toHaveTextContent('hostPath sources on lab must be under: /data/datasets');
    allow = [];
    cleanup();
    renderPage(<JobWizard />);
    fireEvent.change(screen.getByTestId('wizard-name'), { target: { value: 'job' } });
    fireEvent.click(screen.getByTestId('wizard-next'));
    await screen.findByTestId('wizard-step-1');
    fireEvent.mouseDown(within(screen.getByTestId('role-cluster-0')).getByRole('combobox'));
    fireEvent.click(await screen.findByText(/lab ·/));
    fireEvent.click(screen.getByTestId('add-mount-0'));
    expect(await screen.findByTestId('hostpath-hint')).toHaveTextContent('Cluster lab allows no hostPath mounts');
  });
});
