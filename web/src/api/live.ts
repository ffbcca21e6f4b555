/**
 * Live updates: one EventSource on `GET /api/v1/events` for the whole console. Every event marks
 * the queries it affects as stale; react-query then refetches the ones on screen. Invalidations are
 * batched (a busy cluster sends many node events a second) so a page refetches at most a few times
 * a second, whatever the event rate.
 */
import { useEffect, useState } from 'react';
import type { QueryClient, QueryKey } from '@tanstack/react-query';
import { buildUrl } from './client';

/** Event types of docs/asyncapi that the gateway forwards; named SSE events need a listener each. */
export const EVENT_TYPES = [
  'inventory.cluster.registered.v1',
  'inventory.cluster.updated.v1',
  'inventory.cluster.went_online.v1',
  'inventory.cluster.went_offline.v1',
  'inventory.cluster.deleted.v1',
  'inventory.node.updated.v1',
  'inventory.node.gone.v1',
  'netdomain.domain.created.v1',
  'netdomain.domain.deleted.v1',
  'netdomain.addresses.allocated.v1',
  'netdomain.addresses.released.v1',
  'scheduler.job.submitted.v1',
  'scheduler.job.status_changed.v1',
  'scheduler.job.keys_updated.v1',
  'scheduler.worker.placed.v1',
  'agent.worker.status_changed.v1',
  'agent.worker.outputs_listed.v1',
  'keys.key.added.v1',
  'keys.key.renamed.v1',
  'keys.key.deleted.v1',
];

export interface LiveEvent {
  type: string;
  subject?: string;
  data?: Record<string, unknown>;
}

/** The query-key prefixes an event makes stale. */
export function staleKeysFor(event: LiveEvent): QueryKey[] {
  const type = event.type ?? '';
  const data = event.data ?? {};
  const jobId = (data.job_id as string | undefined) ?? (type.startsWith('scheduler.job') ? event.subject : undefined);
  if (type.startsWith('inventory.cluster.')) return [['clusters'], ['cluster']];
  if (type.startsWith('inventory.node.')) {
    return [['clusters'], ['cluster'], ['nodes'], ['node'], ['labels'], ['match']];
  }
  if (type.startsWith('netdomain.')) return [['domains'], ['domain']];
  if (type.startsWith('keys.')) return [['keys']];
  if (type.startsWith('scheduler.') || type.startsWith('agent.worker.')) {
    const keys: QueryKey[] = [['jobs'], ['job-counts']];
    keys.push(jobId ? ['job', jobId] : ['job']);
    if (type.startsWith('agent.worker.') || type === 'scheduler.worker.placed.v1') keys.push(['node'], ['clusters']);
    return keys;
  }
  return [];
}

export function parseEvent(raw: string, fallbackType?: string): LiveEvent | null {
  try {
    const parsed = JSON.parse(raw) as LiveEvent;
    if (!parsed || typeof parsed !== 'object') return null;
    return { ...parsed, type: parsed.type ?? fallbackType ?? '' };
  } catch {
    return null;
  }
}

export type LiveState = 'connecting' | 'open' | 'closed';

/** Keeps the console's event stream open while `enabled`; returns the connection state. */
export function useLiveEvents(client: QueryClient, enabled: boolean): LiveState {
  const [state, setState] = useState<LiveState>('closed');
  useEffect(() => {
    if (!enabled || typeof EventSource === 'undefined') return undefined;
    const pending = new Map<string, QueryKey>();
    let timer: ReturnType<typeof setTimeout> | null = null;
    const flush = () => {
      timer = null;
      for (const key of pending.values()) void client.invalidateQueries({ queryKey: key });
      pending.clear();
    };
    const handle = (raw: string, type?: string) => {
      const event = parseEvent(raw, type);
      if (!event) return;
      for (const key of staleKeysFor(event)) pending.set(JSON.stringify(key), key);
      if (!timer && pending.size) timer = setTimeout(flush, 400);
    };
    // EventSource retries by itself after a dropped connection, but gives up for good on an HTTP
    // error (gateway restarting, 502 from a proxy); then reconnect here with a growing delay.
    let source: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | null = null;
    let delay = 2_000;
    let stopped = false;
    const connect = () => {
      setState('connecting');
      const current = new EventSource(buildUrl('/events'), { withCredentials: true });
      source = current;
      current.onopen = () => {
        delay = 2_000;
        setState('open');
      };
      current.onerror = () => {
        if (current.readyState !== EventSource.CLOSED) {
          setState('connecting');
          return;
        }
        setState('closed');
        current.close();
        if (!stopped) {
          retry = setTimeout(connect, delay);
          delay = Math.min(delay * 2, 60_000);
        }
      };
      current.onmessage = (message) => handle(message.data as string);
      for (const type of EVENT_TYPES) {
        current.addEventListener(type, (message: MessageEvent) => handle(message.data as string, type));
      }
    };
    connect();
    return () => {
      stopped = true;
      source?.close();
      if (retry) clearTimeout(retry);
      if (timer) clearTimeout(timer);
      setState('closed');
    };
  }, [client, enabled]);
  return state;
}
