/** Small display helpers shared by pages. */
import dayjs from 'dayjs';

export function formatTime(value?: string | null): string {
  if (!value) return '—';
  const d = dayjs(value);
  return d.isValid() ? d.format('YYYY-MM-DD HH:mm:ss') : value;
}

export function formatBytes(bytes?: number | null): string {
  if (bytes === undefined || bytes === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

export function formatCpu(millis?: number | null): string {
  if (millis === undefined || millis === null) return '—';
  return `${(millis / 1000).toFixed(millis % 1000 === 0 ? 0 : 1)}`;
}

export function percent(part: number, total: number): number {
  return total > 0 ? Math.round((part / total) * 100) : 0;
}
