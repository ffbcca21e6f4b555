import { act, renderHook } from '@testing-library/react';
import { QueryClient } from '@tanstack/react-query';
import { describe, expect, it, vi } from 'vitest';
import { useLiveEvents } from '../api/live';

class FakeEventSource {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSED = 2;
  static instances: FakeEventSource[] = [];
  readyState = FakeEventSource.CONNECTING;
  onopen: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onmessage: ((e: MessageEvent) => void) | null = null;
  listeners = new Map<string, (e: MessageEvent) => void>();
  closed = false;
  constructor(public url: string) {
    FakeEventSource.instances.push(this);
  }
  addEventListener(type: string, fn: (e: MessageEvent) => void) {
    this.listeners.set(type, fn);
  }
  close() {
    this.closed = true;
    this.readyState = FakeEventSource.CLOSED;
  }
  emit(type: string, data: unknown) {
    this.listeners.get(type)?.({ data: JSON.stringify(data) } as MessageEvent);
  }
}

describe('live updates', () => {
  it('turns a burst of events into one refetch per affected query and reconnects after the stream fails', () => {
    vi.useFakeTimers();
    FakeEventSource.instances = [];
    vi.stubGlobal('EventSource', FakeEventSource);
    const client = new QueryClient();
    const invalidate = vi.spyOn(client, 'invalidateQueries').mockResolvedValue(undefined);
    const { result, unmount } = renderHook(() => useLiveEvents(client, true));
    const first = FakeEventSource.instances[0];
    expect(first.url).toBe('/api/v1/events');
    act(() => first.onopen?.());
    expect(result.current).toBe('open');

    act(() => {
      for (let i = 0; i < 50; i += 1) first.emit('inventory.node.updated.v1', { type: 'inventory.node.updated.v1', data: { cluster: 'gpu-a' } });
      first.emit('scheduler.job.status_changed.v1', { type: 'scheduler.job.status_changed.v1', data: { job_id: 'j1' } });
    });
    expect(invalidate).not.toHaveBeenCalled();
    act(() => vi.advanceTimersByTime(500));
    const keys = invalidate.mock.calls.map(([filters]) => JSON.stringify(filters?.queryKey));
    expect(keys.filter((k) => k === '["nodes"]')).toHaveLength(1);
    expect(keys).toContain('["job","j1"]');

    act(() => {
      first.readyState = FakeEventSource.CLOSED;
      first.onerror?.();
    });
    expect(result.current).toBe('closed');
    act(() => vi.advanceTimersByTime(2_100));
    expect(FakeEventSource.instances).toHaveLength(2);

    unmount();
    expect(FakeEventSource.instances[1].closed).toBe(true);
    vi.useRealTimers();
  });
});
