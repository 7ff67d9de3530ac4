import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { api, must, type Queue, type StepBodiesSetting, type Throughput } from '../api';
import { Empty, Notice, PollError, ago, useNotice, usePoll } from '../ui';
import { navigate } from '../router';

const COUNTS = ['runnable', 'executing', 'awaiting', 'done', 'failed', 'cancelled'] as const;

/** BODIES says what each step_bodies setting keeps in the step history. */
const BODIES: Record<StepBodiesSetting, string> = {
  failures: 'the request and response bodies of failed attempts',
  all: 'the request and response bodies of every attempt',
  off: 'no request or response bodies',
};

/**
 * Queues shows each queue's counts, lag and throughput, and pauses or resumes it. The queue
 * whose chart is shown is in the URL (#/queues?queue=payments), the first one when none is.
 */
export function Queues({ selected: chosen }: { selected?: string }) {
  const [queues, setQueues] = useState<Queue[] | null>(null);
  const { notice, ok, fail } = useNotice();
  const { error, refresh } = usePoll(
    (signal) => must(api.GET('/v1/queues', { signal })),
    (r) => setQueues(r.queues),
    3000,
    [],
  );
  const selected = chosen || queues?.[0]?.name || '';

  const toggle = async (q: Queue) => {
    try {
      await must(api.PUT('/v1/queues/{name}', { params: { path: { name: q.name } }, body: { paused: !q.paused } }));
      ok(q.paused ? `Queue ${q.name} resumed.` : `Queue ${q.name} paused: running steps finish, nothing new starts.`);
      await refresh();
    } catch (e) {
      fail(e);
    }
  };

  const setBodies = async (q: Queue, step_bodies: StepBodiesSetting) => {
    try {
      await must(api.PUT('/v1/queues/{name}', { params: { path: { name: q.name } }, body: { step_bodies } }));
      ok(`Queue ${q.name} keeps ${BODIES[step_bodies]}.`);
      await refresh();
    } catch (e) {
      fail(e);
    }
  };

  if (queues && queues.length === 0 && !error) {
    return <Empty title="No queues yet">A queue appears with its first job.</Empty>;
  }
  return (
    <section>
      <PollError error={error} stale={queues !== null} />
      <Notice notice={notice} />
      <div class="table-wrap">
        <table data-testid="queues">
          <thead>
            <tr>
              <th>Queue</th>
              {COUNTS.map((c) => (
                <th class="num">{c}</th>
              ))}
              <th>Oldest runnable</th>
              <th class="num">In flight cap</th>
              <th class="num">Batch</th>
              <th title="Which attempts keep their request and response bodies in the timeline">Step bodies</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {(queues ?? []).map((q) => (
              <tr key={q.name} class={q.name === selected ? 'selected' : ''}>
                <td>
                  <button class="link" onClick={() => navigate('/queues', { queue: q.name })} aria-pressed={q.name === selected}>
                    {q.name}
                  </button>
                  {q.paused && <span class="badge s-cancelled">paused</span>}
                </td>
                {COUNTS.map((c) => (
                  <td class="num">
                    <a href={`#/runs?queue=${encodeURIComponent(q.name)}&status=${c}`}>{q.counts[c]}</a>
                  </td>
                ))}
                <td>{q.oldest_runnable_at ? ago(q.oldest_runnable_at) : '—'}</td>
                <td class="num">{q.max_in_flight}</td>
                <td class="num">{q.batch}</td>
                <td>
                  <select
                    aria-label={`Step bodies of ${q.name}`}
                    data-testid="step-bodies"
                    title={`Keeps ${BODIES[q.step_bodies]}`}
                    value={q.step_bodies}
                    onChange={(e) => setBodies(q, (e.target as HTMLSelectElement).value as StepBodiesSetting)}
                  >
                    <option value="failures">failures</option>
                    <option value="all">all</option>
                    <option value="off">off</option>
                  </select>
                </td>
                <td>
                  <button onClick={() => toggle(q)}>{q.paused ? 'Resume' : 'Pause'}</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {selected && <Chart queue={selected} />}
    </section>
  );
}

function Chart({ queue }: { queue: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const [data, setData] = useState<Throughput | null>(null);
  const { error } = usePoll(
    (signal) =>
      must(api.GET('/v1/queues/{name}/throughput', { params: { path: { name: queue }, query: { minutes: 60 } }, signal })),
    setData,
    10000,
    [queue],
  );

  useEffect(() => {
    if (!box.current || !data) return;
    // One point per minute of the last hour, zeros where nothing finished.
    const now = Math.floor(Date.now() / 60000) * 60;
    const xs: number[] = [];
    const total: number[] = [];
    const failed: number[] = [];
    const rate: (number | null)[] = [];
    const byMinute = new Map(data.points.map((p) => [Math.floor(new Date(p.minute).getTime() / 1000), p]));
    for (let t = now - 59 * 60; t <= now; t += 60) {
      xs.push(t);
      total.push(byMinute.get(t)?.total ?? 0);
      failed.push(byMinute.get(t)?.failed ?? 0);
      const p = byMinute.get(t);
      rate.push(p && p.total > 0 ? (100 * p.failed) / p.total : null);
    }
    const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
    const hourTotal = sum(total);
    const hourFailed = sum(failed);
    // Away from the cursor the legend shows the hour's figures (uPlot's default is "--"),
    // under it the minute's.
    const hour = [
      'last hour',
      `${hourTotal}`,
      `${hourFailed}`,
      hourTotal ? `${((100 * hourFailed) / hourTotal).toFixed(1)} %` : 'none',
    ];
    const value = (i: number, minute: (v: number) => string) => (_u: uPlot, v: number | null, _s: number, idx: number | null) =>
      idx == null ? hour[i] : v === null ? '—' : minute(v);
    const opts: uPlot.Options = {
      width: Math.min(box.current.clientWidth || 640, 900),
      height: 200,
      series: [
        { value: value(0, (v) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })) },
        { label: 'steps', stroke: '#2563eb', width: 2, value: value(1, (v) => `${v}/min`) },
        { label: 'failed', stroke: '#dc2626', width: 1.5, value: value(2, (v) => `${v}/min`) },
        { label: 'error rate', stroke: '#f59e0b', width: 1, dash: [4, 3], scale: '%', spanGaps: false, value: value(3, (v) => `${v.toFixed(1)} %`) },
      ],
      scales: { '%': { range: [0, 100] } },
      axes: [{}, { size: 50 }, { scale: '%', side: 1, size: 50, grid: { show: false }, values: (_u, vs) => vs.map((v) => `${v}%`) }],
    };
    plot.current?.destroy();
    plot.current = new uPlot(opts, [xs, total, failed, rate], box.current);
    return () => plot.current?.destroy();
  }, [data]);

  return (
    <figure class="chart">
      <figcaption>
        Throughput and error rate of {queue}, per minute over the last hour (failed: failed attempts, retried or not)
      </figcaption>
      <PollError error={error} stale={data !== null} />
      <div ref={box} style={{ minHeight: '230px' }} />
    </figure>
  );
}
