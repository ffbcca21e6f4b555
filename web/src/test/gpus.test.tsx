/** The same GPU numbers — free of allocatable, in use, and by workloads RLark did not place — on the
 * overview, the cluster list, a cluster and a node, as the API serves them. */
import { screen, waitFor, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import i18n from '../i18n';
import ClusterDetail from '../pages/ClusterDetail';
import Clusters from '../pages/Clusters';
import NodeDetail from '../pages/NodeDetail';
import Overview from '../pages/Overview';
import { mockApi, renderPage } from './helpers';

const PAGE = { total: 1, page: 1, page_size: 500 };
const SUMMARY = {
  nodes_total: 3, nodes_online: 3, nodes_offline: 0, online_rate: 1,
  gpus_total: 20, gpus_allocatable: 20, gpus_allocated: 16, gpus_allocated_foreign: 8, gpus_free: 4,
  running_jobs: 1, running_workers: 1,
};
const CLUSTER = { name: 'local', online: true, runtime: 'local', summary: SUMMARY };
const TOTALS = { ...SUMMARY, clusters: 1, clusters_online: 1 };
const NODE = {
  cluster: 'local', name: 'local-a100-0', status: 'ready', ready: true, schedulable: true, gone: false,
  gpu_count: 8, gpu_model: 'A100', gpu_allocatable: 8, gpu_allocated: 8, gpu_allocated_foreign: 0, gpu_free: 0,
  labels: {}, workers: [],
};

describe('GPUs in use', () => {
  it('the overview shows free of allocatable GPUs and who holds the rest, from the API totals', async () => {
    await i18n.changeLanguage('en');
    mockApi({
      'GET /api/v1/clusters': { ...PAGE, items: [CLUSTER], totals: TOTALS },
      'GET /api/v1/jobs': { total: 0, page: 1, page_size: 8, items: [] },
    });
    renderPage(<Overview />);
    const gpus = await screen.findByTestId('stat-gpus');
    await waitFor(() => expect(gpus).toHaveTextContent(/4\s*\/ 20/));
    expect(screen.getByTestId('overview-gpus-in-use')).toHaveTextContent('16 in use (8 by workloads RLark did not place)');
  });

  it('the cluster list, a cluster and its nodes say the same', async () => {
    await i18n.changeLanguage('en');
    mockApi({
      'GET /api/v1/clusters': { ...PAGE, items: [CLUSTER], totals: TOTALS },
      'GET /api/v1/clusters/local': CLUSTER,
      'GET /api/v1/nodes': { total: 1, page: 1, page_size: 20, items: [NODE] },
      'GET /api/v1/labels': { items: [] },
    });
    renderPage(<Clusters />);
    expect(await screen.findByTestId('cluster-gpus-local')).toHaveTextContent(/4\s*\/\s*20/);
    expect(screen.getByTestId('cluster-gpus-in-use-local')).toHaveTextContent('16 in use (8 by workloads RLark did not place)');

    renderPage(<ClusterDetail />, { route: '/clusters/local', path: '/clusters/:name' });
    const stat = await screen.findByTestId('cluster-stat-gpus');
    expect(stat).toHaveTextContent(/4\s*\/ 20/);
    expect(stat).toHaveTextContent('16 in use (8 by workloads RLark did not place)');
    const row = (await screen.findByText('local-a100-0')).closest('tr');
    expect(row).not.toBeNull();
    expect(within(row as HTMLElement).getByText('8 in use')).toBeInTheDocument();
  });

  it('a node shows what is allocated on it and what is free', async () => {
    await i18n.changeLanguage('en');
    mockApi({ 'GET /api/v1/clusters/local/nodes/local-a100-0': { ...NODE, gpu_allocated: 6, gpu_allocated_foreign: 2, gpu_free: 2 } });
    renderPage(<NodeDetail />, { route: '/clusters/local/nodes/local-a100-0', path: '/clusters/:cluster/nodes/:node' });
    const gpus = await screen.findByTestId('node-gpus');
    expect(gpus).toHaveTextContent(/6\s*\/\s*8/);
    expect(gpus).toHaveTextContent('6 in use (2 by workloads RLark did not place)');
    expect(gpus).toHaveTextContent('2 free now');
  });
});
