/**
 * The frame around every page: navigation, the language switch, the live-update indicator and the
 * user menu. Admin-only entries are hidden from users (the server refuses them anyway).
 */
import { Badge, Button, Dropdown, Layout, Menu, Segmented, Space, Tooltip, Typography } from 'antd';
import {
  ApartmentOutlined,
  BellOutlined,
  ApiOutlined,
  ClusterOutlined,
  DashboardOutlined,
  DeploymentUnitOutlined,
  KeyOutlined,
  LockOutlined,
  LogoutOutlined,
  OrderedListOutlined,
  SettingOutlined,
  TeamOutlined,
  UserOutlined,
} from '@ant-design/icons';
import type { ReactNode } from 'react';
import { useTranslation } from 'react-i18next';
import { Link, useLocation, useNavigate } from 'react-router-dom';
import { setLanguage, type Language } from '../i18n';
import { useSession } from '../auth';
import type { LiveState } from '../api/live';

export function LanguageSwitch() {
  const { i18n, t } = useTranslation();
  return (
    <Segmented
      size="small"
      aria-label={t('header.language')}
      data-testid="lang-switch"
      value={i18n.language as Language}
      options={[
        { label: '中文', value: 'zh-CN' },
        { label: 'English', value: 'en' },
      ]}
      onChange={(value) => void setLanguage(value as Language)}
    />
  );
}

const LIVE_STATUS: Record<LiveState, 'success' | 'processing' | 'default'> = {
  open: 'success',
  connecting: 'processing',
  closed: 'default',
};

export default function AppShell({ children, live }: { children: ReactNode; live: LiveState }) {
  const { t } = useTranslation();
  const { user, isAdmin, logout } = useSession();
  const location = useLocation();
  const navigate = useNavigate();
  const section = '/' + (location.pathname.split('/')[1] ?? '');
  const items = [
    { key: '/', icon: <DashboardOutlined />, label: <Link to="/">{t('nav.overview')}</Link> },
    { key: '/clusters', icon: <ClusterOutlined />, label: <Link to="/clusters">{t('nav.clusters')}</Link> },
    { key: '/jobs', icon: <DeploymentUnitOutlined />, label: <Link to="/jobs">{t('nav.jobs')}</Link> },
    { key: '/queue', icon: <OrderedListOutlined />, label: <Link to="/queue">{t('nav.queue')}</Link> },
    { key: '/keys', icon: <KeyOutlined />, label: <Link to="/keys">{t('nav.keys')}</Link> },
    { key: '/secrets', icon: <LockOutlined />, label: <Link to="/secrets">{t('nav.secrets')}</Link> },
    { key: '/domains', icon: <ApartmentOutlined />, label: <Link to="/domains">{t('nav.domains')}</Link> },
    { key: '/projects', icon: <TeamOutlined />, label: <Link to="/projects">{t('nav.projects')}</Link> },
    { key: '/notifications', icon: <BellOutlined />, label: <Link to="/notifications">{t('nav.notifications')}</Link> },
    ...(isAdmin
      ? [{ key: '/admin', icon: <SettingOutlined />, label: <Link to="/admin">{t('nav.admin')}</Link> }]
      : []),
  ];
  return (
    <Layout className="app-shell">
      <a href="#main" className="skip-link">
        {t('nav.skip')}
      </a>
      <Layout.Header className="app-header">
        <Link to="/" className="brand" aria-label={t('header.home')}>
          RLark
        </Link>
        <Typography.Text className="brand-sub">{t('header.subtitle')}</Typography.Text>
        <div className="header-spacer" />
        <Space size="middle">
          <Tooltip title={t(`live.${live}`)}>
            <Badge status={LIVE_STATUS[live]} text={<span className="header-text">{t('live.label')}</span>} data-testid="live-state" />
          </Tooltip>
          <LanguageSwitch />
          <Dropdown
            trigger={['click']}
            menu={{
              items: [
                { key: 'role', label: t(`roles.${user?.role ?? 'user'}`), disabled: true },
                { key: 'keys', icon: <KeyOutlined />, label: t('nav.keys') },
                { key: 'secrets', icon: <LockOutlined />, label: t('nav.secrets') },
                { key: 'tokens', icon: <ApiOutlined />, label: t('nav.tokens') },
                { type: 'divider' },
                { key: 'logout', icon: <LogoutOutlined />, label: t('header.logout'), danger: true },
              ],
              onClick: ({ key }) => {
                if (key === 'keys') navigate('/keys');
                if (key === 'secrets') navigate('/secrets');
                if (key === 'tokens') navigate('/tokens');
                if (key === 'logout') void logout().then(() => navigate('/login'));
              },
            }}
          >
            <Button type="text" icon={<UserOutlined />} data-testid="user-menu" className="header-user">
              {user?.username}
            </Button>
          </Dropdown>
        </Space>
      </Layout.Header>
      <Layout>
        <Layout.Sider width={200} theme="light" breakpoint="lg" collapsedWidth={56} className="app-sider">
          <Menu mode="inline" selectedKeys={[section]} items={items} aria-label={t('nav.label')} />
        </Layout.Sider>
        <Layout.Content className="app-content" id="main" tabIndex={-1}>
          {children}
        </Layout.Content>
      </Layout>
    </Layout>
  );
}
