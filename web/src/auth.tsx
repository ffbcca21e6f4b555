/**
 * The session: who is logged in (`GET /auth/me`), login and logout. A 401 from any call clears the
 * cached user, which sends the console to the login page.
 */
import { createContext, useContext, useEffect, useMemo, type ReactNode } from 'react';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { ApiError, onUnauthorized } from './api/client';
import { authApi } from './api/endpoints';
import type { User } from './api/types';

interface Session {
  user: User | null;
  loading: boolean;
  isAdmin: boolean;
  login: (username: string, password: string) => Promise<User>;
  logout: () => Promise<void>;
}

const SessionContext = createContext<Session | null>(null);
export const ME_KEY = ['me'] as const;

export function SessionProvider({ children }: { children: ReactNode }) {
  const client = useQueryClient();
  const me = useQuery({
    queryKey: ME_KEY,
    queryFn: async () => {
      try {
        return await authApi.me();
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) return null;
        throw error;
      }
    },
    staleTime: 60_000,
    retry: false,
  });
  useEffect(() => {
    onUnauthorized(() => client.setQueryData(ME_KEY, null));
    return () => onUnauthorized(null);
  }, [client]);
  const loginMutation = useMutation({
    mutationFn: ({ username, password }: { username: string; password: string }) => authApi.login(username, password),
  });
  // Another user's data must not survive a login or logout; the session query itself stays so
  // its observers keep working.
  const forgetOtherQueries = () => client.removeQueries({ predicate: (query) => query.queryKey[0] !== ME_KEY[0] });
  const value = useMemo<Session>(
    () => ({
      user: me.data ?? null,
      loading: me.isLoading,
      isAdmin: me.data?.role === 'admin',
      login: async (username, password) => {
        const result = await loginMutation.mutateAsync({ username, password });
        forgetOtherQueries();
        client.setQueryData(ME_KEY, result.user);
        return result.user;
      },
      logout: async () => {
        try {
          await authApi.logout();
        } finally {
          forgetOtherQueries();
          client.setQueryData(ME_KEY, null);
        }
      },
    }),
    [me.data, me.isLoading, loginMutation, client],
  );
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error('useSession outside SessionProvider');
  return session;
}
