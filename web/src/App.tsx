/** Routes of the console; pages load on demand so the first screen stays light. */
import { Button, Result, Spin } from 'antd';
import { lazy, Suspense, type ReactNode } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { useTranslation } from 'react-i18next';
import { Link, Navigate, Route, Routes, useLocation } from 'react-router-dom';
import AppShell from './components/AppShell';
import { useLiveEvents } from './api/live';
import { useSession } from './auth';
import LoginPage from './pages/Login';

const Overview = lazy(() => import('./pages/Overview'));
const Clusters = lazy(() => import('./pages/Clusters'));
const ClusterDetail = lazy(() => import('./pages/ClusterDetail'));
const NodeDetail = lazy(() => import('./pages/NodeDetail'));
const Keys = lazy(() => import('./pages/Keys'));
const Secrets = lazy(() => import('./pages/Secrets'));
const Tokens = lazy(() => import('./pages/Tokens'));
const Domains = lazy(() => import('./pages/Domains'));
const Projects = lazy(() => import('./pages/Projects'));
const Queue = lazy(() => import('./pages/Queue'));
const Notifications = lazy(() => import('./pages/Notifications'));
const Jobs = lazy(() => import('./pages/jobs/Jobs'));
const JobWizard = lazy(() => import('./pages/jobs/JobWizard'));
const JobYaml = lazy(() => import('./pages/jobs/JobYaml'));
const JobDetail = lazy(() => import('./pages/jobs/JobDetail'));
const Admin = lazy(() => import('./pages/admin/Admin'));

function Loading() {
  return (
    <div className="center-fill">
      <Spin size="large" />
    </div>
  );
}

function Authenticated({ children }: { children: ReactNode }) {
  const { user, loading } = useSession();
  const location = useLocation();
  const client = useQueryClient();
  const live = useLiveEvents(client, Boolean(user));
  if (loading) return <Loading />;
  if (!user) return <Navigate to="/login" replace state={{ from: location.pathname + location.search }} />;
  return (
    <AppShell live={live}>
      <Suspense fallback={<Loading />}>{children}</Suspense>
    </AppShell>
  );
}

/** Admin pages for admins only; anyone else reached them by URL and is told so (the API refuses them too). */
function AdminOnly({ children }: { children: ReactNode }) {
  const { t } = useTranslation();
  const { isAdmin } = useSession();
  if (isAdmin) return children;
  return (
    <Result
      status="403"
      title="403"
      subTitle={<span data-testid="forbidden">{t('admin.forbidden')}</span>}
      extra={
        <Link to="/">
          <Button type="primary">{t('admin.backHome')}</Button>
        </Link>
      }
    />
  );
}

export default function App() {
  const page = (element: ReactNode) => <Authenticated>{element}</Authenticated>;
  const adminPage = (element: ReactNode) => page(<AdminOnly>{element}</AdminOnly>);
  return (
    <Routes>
      <Route path="/login" element={<LoginPage />} />
      <Route path="/" element={page(<Overview />)} />
      <Route path="/clusters" element={page(<Clusters />)} />
      <Route path="/clusters/:name" element={page(<ClusterDetail />)} />
      <Route path="/clusters/:cluster/nodes/:node" element={page(<NodeDetail />)} />
      <Route path="/keys" element={page(<Keys />)} />
      <Route path="/secrets" element={page(<Secrets />)} />
      <Route path="/tokens" element={page(<Tokens />)} />
      <Route path="/domains" element={page(<Domains />)} />
      <Route path="/projects" element={page(<Projects />)} />
      <Route path="/queue" element={page(<Queue />)} />
      <Route path="/notifications" element={page(<Notifications />)} />
      <Route path="/jobs" element={page(<Jobs />)} />
      <Route path="/jobs/new" element={page(<JobWizard />)} />
      <Route path="/jobs/new/yaml" element={page(<JobYaml />)} />
      <Route path="/jobs/:id" element={page(<JobDetail />)} />
      <Route path="/admin" element={adminPage(<Admin />)} />
      <Route path="/admin/:tab" element={adminPage(<Admin />)} />
      <Route path="*" element={<Navigate to="/" replace />} />
    </Routes>
  );
}
