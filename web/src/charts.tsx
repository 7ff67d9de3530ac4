// StepCharts: a queue's or a handler's throughput, error rate and latency over the last
// hour, live (GET /v1/stats/steps, one point a minute, refreshed every 10 seconds).
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { api, must, type StepStats } from './api';
import { PollError, ms, usePoll } from './ui';

type Legend = (i: number, minute: (v: number) => string) => uPlot.Series['value'];

// legendOf shows the hour's figures away from the cursor (uPlot's default is "--") and the
// minute's under it.
function legendOf(hour: string[]): Legend {
  return (i, minute) => (_u: uPlot, v: number | null, _s: number, idx: number | null) =>
    idx == null ? hour[i] : v === null || v === undefined ? '—' : minute(v);
}

const clock = (v: number) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

// usePlot draws a uPlot into box whenever data changes, and destroys it on the next draw.
function usePlot(box: { current: HTMLDivElement | null }, make: (width: number) => [uPlot.Options, uPlot.AlignedData] | null, deps: unknown[]) {
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!box.current) return;
    const made = make(Math.min(box.current.clientWidth || 640, 900));
    if (!made) return;
    plot.current?.destroy();
    plot.current = new uPlot(made[0], made[1], box.current);
    return () => plot.current?.destroy();
  }, deps);
}

/**
 * StepCharts shows two charts of the steps of one queue or one handler: attempts per
 * minute with their retried and failed parts and the error rate, and the p50/p95/p99 of
 * the attempts' durations.
 */
export function StepCharts({ queue, handler }: { queue?: string; handler?: string }) {
  const [data, setData] = useState<StepStats | null>(null);
  const { error } = usePoll(
    (signal) => must(api.GET('/v1/stats/steps', { params: { query: { queue, handler, window: '1h', bucket: '1m' } }, signal })),
    setData,
    10000,
    [queue, handler],
  );
  const rates = useRef<HTMLDivElement>(null);
  const latency = useRef<HTMLDivElement>(null);
  const points = data?.points ?? [];
  const xs = points.map((p) => new Date(p.at).getTime() / 1000);

  usePlot(rates, (width) => {
    if (!data) return null;
    const total = points.map((p) => p.total);
    const retry = points.map((p) => p.retry);
    const failed = points.map((p) => p.failed);
    const rate = points.map((p) => (p.total > 0 ? (100 * (p.retry + p.failed)) / p.total : null));
    const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
    const [t, r, f] = [sum(total), sum(retry), sum(failed)];
    const value = legendOf(['last hour', `${t}`, `${r}`, `${f}`, t ? `${((100 * (r + f)) / t).toFixed(1)} %` : 'none']);
    return [
      {
        width,
        height: 200,
        series: [
          { value: value(0, clock) },
          { label: 'steps', stroke: '#2563eb', width: 2, value: value(1, (v) => `${v}/min`) },
          { label: 'retried', stroke: '#f97316', width: 1.5, value: value(2, (v) => `${v}/min`) },
          { label: 'failed', stroke: '#dc2626', width: 1.5, value: value(3, (v) => `${v}/min`) },
          { label: 'error rate', stroke: '#f59e0b', width: 1, dash: [4, 3], scale: '%', spanGaps: false, value: value(4, (v) => `${v.toFixed(1)} %`) },
        ],
        scales: { '%': { range: [0, 100] } },
        axes: [{}, { size: 50 }, { scale: '%', side: 1, size: 50, grid: { show: false }, values: (_u, vs) => vs.map((v) => `${v}%`) }],
      },
      [xs, total, retry, failed, rate],
    ];
  }, [data]);

  usePlot(latency, (width) => {
    if (!data) return null;
    const pick = (k: 'p50' | 'p95' | 'p99') => points.map((p) => p.latency_ms?.[k] ?? null);
    const series = [pick('p50'), pick('p95'), pick('p99')];
    // Away from the cursor: the hour's slowest minute of each percentile.
    const peak = series.map((s) => {
      const vs = s.filter((v): v is number => v !== null);
      return vs.length ? ms(Math.max(...vs)) : 'none';
    });
    const value = legendOf(['last hour, slowest minute', ...peak]);
    return [
      {
        width,
        height: 200,
        series: [
          { value: value(0, clock) },
          { label: 'p50', points: { show: true, size: 5 }, stroke: '#16a34a', width: 2, spanGaps: false, value: value(1, ms) },
          { label: 'p95', points: { show: true, size: 5 }, stroke: '#9333ea', width: 1.5, spanGaps: false, value: value(2, ms) },
          { label: 'p99', points: { show: true, size: 5 }, stroke: '#db2777', width: 1, dash: [4, 3], spanGaps: false, value: value(3, ms) },
        ],
        // From 0: a lone minute's percentiles are drawn against the floor, not against each other.
        scales: { y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
        axes: [{}, { size: 60, values: (_u, vs) => vs.map((v) => ms(v)) }],
      },
      [xs, ...series],
    ];
  }, [data]);

  const of = queue ?? handler;
  return (
    <div class="step-charts">
      <PollError error={error} stale={data !== null} />
      <figure class="chart" data-testid="throughput-chart">
        <figcaption>
          Throughput and error rate of {of}, per minute over the last hour (retried: attempts that failed and may run
          again; failed: no retry asked, or a job's last attempt)
        </figcaption>
        <div ref={rates} style={{ minHeight: '230px' }} />
      </figure>
      <figure class="chart" data-testid="latency-chart">
        <figcaption>Latency of {of}'s attempts (p50, p95, p99 of a minute: from the webhook call to its outcome)</figcaption>
        <div ref={latency} style={{ minHeight: '230px' }} />
      </figure>
    </div>
  );
}
