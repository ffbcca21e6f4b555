/**
 * A small SVG line of one series (a worker's CPU, memory or GPU use over time). Hand-written: three lines per
 * worker do not need a charting library's weight in the bundle, and an SVG polyline is all they draw.
 */
export interface SparklineProps {
  values: Array<number | null>;
  /** The top of the scale (e.g. 100 for percentages); the series' own maximum when left out. */
  max?: number;
  width?: number;
  height?: number;
  label: string;
  testId?: string;
}

export default function Sparkline({ values, max, width = 160, height = 32, label, testId }: SparklineProps) {
  const known = values.filter((v): v is number => v !== null && Number.isFinite(v));
  const top = max ?? Math.max(...known, 0);
  const scale = top > 0 ? top : 1;
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const points = values
    .map((v, i) => (v === null ? null : `${(i * step).toFixed(1)},${(height - 1 - (Math.min(v, scale) / scale) * (height - 2)).toFixed(1)}`))
    .filter((p): p is string => p !== null)
    .join(' ');
  return (
    <svg role="img" aria-label={label} data-testid={testId} width={width} height={height} viewBox={`0 0 ${width} ${height}`}>
      <rect x={0} y={0} width={width} height={height} fill="none" stroke="#f0f0f0" />
      {points && <polyline points={points} fill="none" stroke="#1677ff" strokeWidth={1.5} />}
    </svg>
  );
}
