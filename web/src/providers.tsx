/**
 * Everything a page needs around it: react-query, Ant Design's locale following the console
 * language, and Ant Design's App context (message/notification/modal hooks). Used by the app and
 * by component tests alike.
 */
import { App as AntApp, ConfigProvider } from 'antd';
import enUS from 'antd/locale/en_US';
import zhCN from 'antd/locale/zh_CN';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { ReactNode } from 'react';
import { useTranslation } from 'react-i18next';

export function makeQueryClient(): QueryClient {
  return new QueryClient({
    defaultOptions: {
      queries: { staleTime: 10_000, refetchOnWindowFocus: true, retry: 1 },
      mutations: { retry: false },
    },
  });
}

function LocaleProvider({ children }: { children: ReactNode }) {
  const { i18n } = useTranslation();
  return (
    <ConfigProvider
      locale={i18n.language === 'en' ? enUS : zhCN}
      theme={{ token: { colorPrimary: '#2f54eb', borderRadius: 6 } }}
    >
      <AntApp>{children}</AntApp>
    </ConfigProvider>
  );
}

export default function Providers({ client, children }: { client: QueryClient; children: ReactNode }) {
  return (
    <QueryClientProvider client={client}>
      <LocaleProvider>{children}</LocaleProvider>
    </QueryClientProvider>
  );
}
