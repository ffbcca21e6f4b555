import { fireEvent, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import en from '../i18n/en.json';
import zhCN from '../i18n/zh-CN.json';
import i18n from '../i18n';
import LoginPage from '../pages/Login';
import { mockApi, renderPage } from './helpers';

function keysOf(tree: object, prefix = ''): string[] {
  return Object.entries(tree).flatMap(([key, value]) =>
    typeof value === 'object' && value !== null
      ? keysOf(value as object, `${prefix}${key}.`)
      : [`${prefix}${key}`.replace(/_(one|other)$/, '')],
  );
}

describe('languages', () => {
  it('starts in Chinese and switches every text to English from the header switch', async () => {
    mockApi({ 'GET /api/v1/auth/setup-status': { needs_setup: false } });
    renderPage(<LoginPage />, { route: '/login', user: null });
    // Ant Design spaces out two-character Chinese button labels ("登 录").
    expect(screen.getByTestId('login-submit')).toHaveTextContent(/^登\s?录$/);
    expect(screen.getByText('用户名')).toBeInTheDocument();

    fireEvent.click(screen.getByText('English'));

    expect(await screen.findByRole('button', { name: 'Sign in' })).toBe(screen.getByTestId('login-submit'));
    expect(screen.getByText('Username')).toBeInTheDocument();
    expect(screen.queryByText('用户名')).not.toBeInTheDocument();
    expect(i18n.language).toBe('en');
    expect(window.localStorage.getItem('rlark.lang')).toBe('en');
    expect(document.documentElement.lang).toBe('en');
  });

  it('has the same keys in both locale files', () => {
    expect(new Set(keysOf(zhCN))).toEqual(new Set(keysOf(en)));
  });
});
