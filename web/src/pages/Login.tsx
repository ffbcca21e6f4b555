/** Login: username and password → session cookie. Explains first-run setup when no user exists. */
import { Alert, Button, Card, Form, Input, Space, Typography } from 'antd';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { useTranslation } from 'react-i18next';
import { Navigate, useLocation, useNavigate } from 'react-router-dom';
import { authApi } from '../api/endpoints';
import { useSession } from '../auth';
import ApiErrorAlert, { applyApiError } from '../components/ApiErrorAlert';
import { LanguageSwitch } from '../components/AppShell';

export default function LoginPage() {
  const { t } = useTranslation();
  const { user, login } = useSession();
  const navigate = useNavigate();
  const location = useLocation();
  const [form] = Form.useForm<{ username: string; password: string }>();
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const setup = useQuery({ queryKey: ['setup-status'], queryFn: authApi.setupStatus, retry: false });
  const from = (location.state as { from?: string } | null)?.from ?? '/';
  if (user) return <Navigate to={from} replace />;

  const submit = async (values: { username: string; password: string }) => {
    setBusy(true);
    setError(null);
    try {
      await login(values.username, values.password);
      navigate(from, { replace: true });
    } catch (err) {
      setError(err);
      applyApiError(form, err, ['username', 'password']);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="login-page">
      <Card className="login-card" data-testid="login-card">
        <Space orientation="vertical" size="middle" style={{ width: '100%' }}>
          <div style={{ display: 'flex', justifyContent: 'space-between', alignItems: 'center' }}>
            <Typography.Title level={3} style={{ margin: 0 }}>
              RLark
            </Typography.Title>
            <LanguageSwitch />
          </div>
          <Typography.Text type="secondary">{t('login.subtitle')}</Typography.Text>
          {(setup.data?.needs_admin ?? setup.data?.needs_setup) && (
            <Alert type="info" showIcon title={t('login.setupTitle')} description={t('login.setupHint')} data-testid="setup-hint" />
          )}
          <ApiErrorAlert error={error} />
          <Form form={form} layout="vertical" onFinish={submit} requiredMark={false}>
            <Form.Item name="username" label={t('login.username')} rules={[{ required: true, message: t('login.usernameRequired') }]}>
              <Input autoComplete="username" autoFocus data-testid="login-username" />
            </Form.Item>
            <Form.Item name="password" label={t('login.password')} rules={[{ required: true, message: t('login.passwordRequired') }]}>
              <Input.Password autoComplete="current-password" data-testid="login-password" />
            </Form.Item>
            <Button type="primary" htmlType="submit" block loading={busy} data-testid="login-submit">
              {t('login.submit')}
            </Button>
          </Form>
        </Space>
      </Card>
    </main>
  );
}
