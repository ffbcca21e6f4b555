/** The console's provider stack (data, locale, session), shared by `main.tsx` and the tests. */
import type { QueryClient } from '@tanstack/react-query';
import type { ReactNode } from 'react';
import Providers from './providers';
import { SessionProvider } from './auth';

export default function Root({ client, children }: { client: QueryClient; children: ReactNode }) {
  return (
    <Providers client={client}>
      <SessionProvider>{children}</SessionProvider>
    </Providers>
  );
}
