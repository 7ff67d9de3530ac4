import { useState } from 'preact/hooks';
import { api, must, type FairnessSetting, type Queue, type StepBodiesSetting } from '../api';
import { StepCharts } from '../charts';
import { Empty, Notice, PollError, ago, useNotice, usePoll } from '../ui';
import { navigate } from '../router';
import { FairnessKeys, type KeyOrder } from './FairnessKeys';

const COUNTS = ['runnable', 'executing', 'awaiting', 'done', 'failed', 'cancelled'] as const;

/** BODIES says what each step_bodies setting keeps in the step history. */
const BODIES: Record<StepBodiesSetting, string> = {
  failures: 'the request and response bodies of failed attempts',
  all: 'the request and response bodies of every attempt',
  off: 'no request or response bodies',
};

/** FAIRNESS says how each fairness setting shares a queue's claims. */
const FAIRNESS: Record<FairnessSetting, string> = {
  none: 'take runnable jobs by priority and age, whoever they are for',
  round_robin: 'give the fairness keys with runnable work turns by their weights',
};

/**
 * OldestRunnable says how long the queue's oldest runnable job has been waiting; when
 * every runnable job is delayed (eligible later), none waits: it says when the next is due.
 */
function OldestRunnable({ at }: { at?: string | null }) {
  if (!at) return <>—</>;
  if (new Date(at).getTime() > Date.now()) return <span class="muted">none due (next {ago(at)})</span>;
  return <>{ago(at)}</>;
}

/**
 * Queues shows each queue's counts, lag and throughput, pauses or resumes it and sets its
 * fairness; under the selected one, a fair queue's keys (see FairnessKeys). The queue
 * whose chart is shown is in the URL (#/queues?queue=payments), the first one when none is.
 */
export function Queues({ selected: chosen, fkey = '', forder }: { selected?: string; fkey?: string; forder?: string }) {
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

  const setFairness = async (q: Queue, fairness: FairnessSetting) => {
    if (fairness === 'round_robin' &&
      !confirm(`Turn on fair share for ${q.name}? Its claims will give each fairness key turns by weight, and it will refuse jobs with a concurrency key or a rate limit.`)) {
      setQueues(queues && [...queues]); // puts the select back
      return;
    }
    try {
      await must(api.PUT('/v1/queues/{name}', { params: { path: { name: q.name } }, body: { fairness } }));
      ok(`Queue ${q.name}'s claims ${FAIRNESS[fairness]}.`);
      await refresh();
    } catch (e) {
      fail(e);
    }
  };

  const current = queues?.find((q) => q.name === selected);
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
              <th title="How the queue's claims share it among fairness keys">Fairness</th>
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
                <td data-testid="oldest-runnable" title={q.oldest_runnable_at ?? ''}>
                  <OldestRunnable at={q.oldest_runnable_at} />
                </td>
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
                  <select
                    aria-label={`Fairness of ${q.name}`}
                    data-testid="fairness"
                    title={`Its claims ${FAIRNESS[q.fairness]}`}
                    value={q.fairness}
                    onChange={(e) => setFairness(q, (e.target as HTMLSelectElement).value as FairnessSetting)}
                  >
                    <option value="none">none</option>
                    <option value="round_robin">round robin</option>
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
      {current?.fairness === 'round_robin' && (
        <FairnessKeys key={current.name} queue={current.name} prefix={fkey} order={forder === 'key' ? 'key' : ('runnable' as KeyOrder)} />
      )}
      {current && current.fairness !== 'round_robin' && (
        <p class="muted" data-testid="fairness-off">
          Fair share is off for {current.name}: its claims {FAIRNESS.none}. Set its fairness to round robin to give each
          tenant's fairness key turns by weight, with a cap per key if you want one.
        </p>
      )}
      {selected && <StepCharts key={selected} queue={selected} />}
    </section>
  );
}
