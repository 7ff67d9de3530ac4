import { useEffect, useState } from 'preact/hooks';
import { api, dashboardSettings, must, traceID, type JobDetail, type Queue, type Signal, type Step, type StepBody } from '../api';
import { Fact, JobBadge, Json, Notice, PollError, ago, ms, useNotice, usePoll } from '../ui';
import { attemptSaid, errorDetail, errorMessage, httpSaid } from '../attempts';
import { Family } from './Family';
import { Gantt } from './Gantt';
import { ReplayForms } from './Replay';

const LIVE = ['runnable', 'executing', 'awaiting'];

/** STEPS_SHOWN is the timeline's page: the oldest attempts, in order. */
const STEPS_SHOWN = 200;

/** ErrorText shows an error's message in full (wrapped), and the rest of it on demand. */
function ErrorText({ error }: { error: unknown }) {
  const message = errorMessage(error);
  const detail = errorDetail(error);
  if (!message) return null;
  return (
    <div class="error-text">
      {message}
      {detail && (
        <details>
          <summary>details</summary>
          <pre>{JSON.stringify(detail, null, 2)}</pre>
        </details>
      )}
    </div>
  );
}

/**
 * Trace shows the run's trace id, linked to the trace viewer when the server has
 * GENDURABLE_TRACE_URL (a URL template with {trace_id}).
 */
function Trace({ traceparent }: { traceparent: string }) {
  const id = traceID(traceparent);
  const [template, setTemplate] = useState<string | undefined>(undefined);
  useEffect(() => {
    let live = true;
    dashboardSettings().then((s) => live && setTemplate(s.trace_url));
    return () => {
      live = false;
    };
  }, []);
  if (!id) return null;
  return (
    <Fact label="Trace" title={traceparent}>
      {template ? (
        <a data-testid="trace-id" href={template.replaceAll('{trace_id}', id)} target="_blank" rel="noopener">
          {id}
        </a>
      ) : (
        <span data-testid="trace-id">{id}</span>
      )}
    </Fact>
  );
}

/** bytes says a size in B, KiB or MiB. */
function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/**
 * Body shows one kept request or response body of an attempt, collapsed: JSON
 * pretty-printed, text as it came, and whether the server's cap cut it.
 */
function Body({ label, body }: { label: 'request' | 'response'; body: StepBody | null }) {
  if (!body) return null;
  const text = body.format === 'json' ? JSON.stringify(body.body, null, 2) : String(body.body);
  return (
    <details class="step-body" data-testid={`step-${label}`}>
      <summary>
        {label} <span class="muted">{bytes(body.size)}</span>
        {body.truncated && (
          <span class="badge truncated" title="longer than the server's GENDURABLE_STEP_BODY_CAP: the start is kept">
            truncated
          </span>
        )}
      </summary>
      <pre>{text}</pre>
    </details>
  );
}

/** Bodies is an attempt's kept bodies (the queue's step_bodies setting decides which are kept). */
function Bodies({ step }: { step: Step }) {
  const b = step.bodies;
  if (!b || (!b.request && !b.response)) return <span class="muted">—</span>;
  return (
    <div class="step-bodies">
      <Body label="request" body={b.request} />
      <Body label="response" body={b.response} />
    </div>
  );
}

const ANSWERED = new Set(['next', 'await', 'spawn', 'done']);

/**
 * Returned is what a successful attempt's handler answered (its kept response body),
 * compact, in full on demand; nothing for a failed attempt (its bodies are beside it).
 */
function Returned({ step }: { step: Step }) {
  const r = step.bodies?.response;
  if (!ANSWERED.has(step.outcome)) return null;
  if (!r) return <span class="muted" title="not kept: see the note above the table">—</span>;
  const text = r.format === 'json' ? JSON.stringify(r.body) : String(r.body);
  return (
    <details class="returned" data-testid="returned">
      <summary>
        <code>{text.length > 80 ? `${text.slice(0, 80)}…` : text}</code>
        {r.truncated && <span class="badge truncated">truncated</span>}
      </summary>
      <pre>{r.format === 'json' ? JSON.stringify(r.body, null, 2) : text}</pre>
    </details>
  );
}

/** BodiesHint says, when the queue does not keep every answer, that and how to turn it on. */
function BodiesHint({ queue }: { queue: Queue | null }) {
  if (!queue || queue.step_bodies === 'all') return null;
  const kept = queue.step_bodies === 'off' ? 'keeps no request or response bodies' : 'keeps the bodies of failed attempts only';
  return (
    <p class="notice info" data-testid="bodies-hint">
      What successful steps returned is not kept: queue <a href={`#/queues?queue=${encodeURIComponent(queue.name)}`}>{queue.name}</a>{' '}
      {kept} (<code>step_bodies: {queue.step_bodies}</code>). Set its step bodies to <strong>all</strong> on the Queues page, or{' '}
      <code>{`PUT /v1/queues/${queue.name} {"step_bodies": "all"}`}</code>, to keep every attempt's from then on.
    </p>
  );
}

/** Run shows one job: its data, step timeline, inbox, family, and the actions on it. */
export function Run({ id }: { id: number }) {
  const [job, setJob] = useState<JobDetail | null>(null);
  const [steps, setSteps] = useState<Step[]>([]);
  const [signals, setSignals] = useState<Signal[]>([]);
  const [queue, setQueue] = useState<Queue | null>(null);
  const { notice, ok, fail } = useNotice();

  const { error, refresh } = usePoll(
    async (signal) => {
      const path = { params: { path: { id } }, signal };
      const [j, st, sg] = await Promise.all([
        must(api.GET('/v1/jobs/{id}', path)),
        must(api.GET('/v1/jobs/{id}/steps', { params: { path: { id }, query: { limit: STEPS_SHOWN } }, signal })),
        must(api.GET('/v1/jobs/{id}/signals', path)),
      ]);
      // The queue's step_bodies setting: whether successful answers are kept (only a hint).
      const q = await must(api.GET('/v1/queues/{name}', { params: { path: { name: j.queue } }, signal })).catch(() => null);
      return [j, st, sg, q] as const;
    },
    ([j, st, sg, q]) => {
      setJob(j);
      setSteps(st.steps);
      setSignals(sg.signals);
      setQueue(q);
    },
    2000,
    [id],
  );

  if (!job) return error ? <PollError error={error} /> : <p class="muted">Loading…</p>;

  const truncated = steps.length >= STEPS_SHOWN;
  const attempts = attemptSaid(job, truncated ? undefined : steps[steps.length - 1]);
  const act = async (what: string, fn: () => Promise<unknown>, done: string) => {
    try {
      await fn();
      ok(done);
      await refresh();
    } catch (e) {
      fail(e);
    }
    void what;
  };
  const sendSignal = async (e: Event) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const f = new FormData(form);
    const name = String(f.get('name') || '').trim();
    const raw = String(f.get('payload') || '').trim();
    let payload: unknown = null;
    try {
      payload = raw ? JSON.parse(raw) : null;
    } catch {
      fail(new Error('The payload is not valid JSON.'));
      return;
    }
    try {
      const r = await must(api.POST('/v1/jobs/{id}/signals', { params: { path: { id } }, body: { name, payload } }));
      ok(r.woke ? `Signal "${name}" delivered; it woke the job.` : `Signal "${name}" delivered to the inbox.`);
      form.reset();
      await refresh();
    } catch (err) {
      fail(err);
    }
  };

  return (
    <section class="run">
      <header class="run-head">
        <h2>
          Run {job.id}{' '}
          <a class="muted" href={`#/handlers/${encodeURIComponent(job.handler)}`} title={`Handler ${job.handler}: its charts`}>
            {job.handler}
          </a>{' '}
          <JobBadge job={job} />
        </h2>
        <div class="actions">
          {LIVE.includes(job.status) && (
            <button
              class="danger"
              onClick={() => confirm(`Cancel run ${job.id}${job.pending_children ? ' and its children' : ''}?`) &&
                act('cancel', () => must(api.POST('/v1/jobs/{id}/cancel', { params: { path: { id: job.id } } })), job.status === 'executing'
                  ? `Cancel requested: run ${job.id} ends when its running step reports.`
                  : `Run ${job.id} cancelled.`)}
            >
              Cancel
            </button>
          )}
          {(job.status === 'failed' || job.status === 'cancelled') && (
            <button onClick={() => act('retry', () => must(api.POST('/v1/jobs/{id}/retry', { params: { path: { id: job.id } } })), `Run ${job.id} is runnable again with fresh attempts.`)}>
              Retry
            </button>
          )}
        </div>
      </header>
      <PollError error={error} stale />
      <Notice notice={notice} />
      {!LIVE.includes(job.status) && (
        <div class="replay" key={`${job.id}-${job.updated_at}`}>
          <ReplayForms job={job} steps={truncated ? [] : steps} onReplayed={refresh} ok={ok} fail={fail} />
        </div>
      )}
      <dl class="facts">
        <Fact label="Queue">{job.queue}</Fact>
        {job.schedule_name && (
          <Fact label="Schedule" title={job.schedule_tick ?? ''}>
            <a href={`#/schedules/${encodeURIComponent(job.schedule_name)}`}>{job.schedule_name}</a>
          </Fact>
        )}
        <Fact label="Key">{job.key ?? '—'}</Fact>
        <Fact label="Steps completed">{job.step}</Fact>
        <Fact label="Attempts" title={attempts.title}>
          <span data-testid="attempts">{attempts.text}</span>
        </Fact>
        <Fact label="Priority">{job.priority}</Fact>
        <Fact label="Created" title={job.created_at}>
          {ago(job.created_at)}
        </Fact>
        <Fact label="Updated" title={job.updated_at}>
          {ago(job.updated_at)}
        </Fact>
        <Fact label={job.status === 'awaiting' ? 'Deadline' : 'Eligible'} title={job.eligible_at ?? ''}>
          {job.eligible_at ? ago(job.eligible_at) : 'none'}
        </Fact>
        {job.finished_at && (
          <Fact label="Finished" title={job.finished_at}>
            {ago(job.finished_at)}
          </Fact>
        )}
        {job.status === 'awaiting' && (
          <Fact label="Awaiting">
            {job.pending_children ? `${job.pending_children} children` : job.awaiting?.join(', ') ?? 'any signal'}
          </Fact>
        )}
        {job.concurrency_key && <Fact label="Concurrency key">{job.concurrency_key}</Fact>}
        {job.fairness_key !== undefined && (
          <Fact label="Fairness key" title="Whose work this is: in a fair queue its key's weight and cap share the claims">
            <a data-testid="fairness-key" href={`#/queues?${new URLSearchParams({ queue: job.queue, fkey: job.fairness_key, forder: 'key' })}`}>
              {job.fairness_key === '' ? '(no key)' : job.fairness_key}
            </a>
          </Fact>
        )}
        {job.rate_limits && job.rate_limits.length > 0 && (
          <Fact label="Rate limits">
            <span data-testid="rate-limits">
              {job.rate_limits
                .map((l) => `${l.name}${l.key ? `[${l.key}]` : ''}${(l.weight ?? 1) !== 1 ? ` ×${l.weight}` : ''}`)
                .join(', ')}
            </span>
          </Fact>
        )}
        {job.debounce_key && (
          <Fact label="Debounce key">
            <span data-testid="debounce-key">{job.debounce_key}</span>
          </Fact>
        )}
        {job.traceparent && <Trace traceparent={job.traceparent} />}
        {job.rerun_of && (
          <Fact label="Rerun of">
            <a href={`#/runs/${job.rerun_of}`} data-testid="rerun-of">run {job.rerun_of}</a>
          </Fact>
        )}
        {job.parent_id && (
          <Fact label="Parent">
            <a href={`#/runs/${job.parent_id}`}>run {job.parent_id}</a>
          </Fact>
        )}
        {job.children_total > 0 && (
          <Fact label="Children">
            {job.children_finished} of {job.children_total} finished
          </Fact>
        )}
      </dl>
      {job.error !== null && job.error !== undefined && (
        <div class="notice error" data-testid="job-error">
          <strong>{job.status === 'failed' ? 'Failed' : job.status === 'cancelled' ? 'Last error' : 'The last attempt failed'}</strong>
          <ErrorText error={job.error} />
        </div>
      )}
      <div class="json-grid">
        <Json label="Input" value={job.input} open />
        <Json label="State" value={job.state} open />
        <Json label="Result" value={job.result} open />
        <Json label="Error" value={job.error} />
      </div>

      <h3>
        Timeline {truncated && <span class="muted">(the first {STEPS_SHOWN} attempts)</span>}
      </h3>
      <Gantt job={job} steps={steps} />
      <h3>Attempts</h3>
      <BodiesHint queue={queue} />
      {steps.length === 0 ? (
        <p class="muted">No attempt has finished yet.</p>
      ) : (
        <div class="table-wrap">
          <table class="timeline" data-testid="timeline">
            <thead>
              <tr>
                <th class="num">Step</th>
                <th class="num">Attempt</th>
                <th>Outcome</th>
                <th class="num">HTTP</th>
                <th class="num">Duration</th>
                <th>Finished</th>
                <th title="What a successful attempt's handler answered (kept with step_bodies: all)">Returned</th>
                <th>Error</th>
                <th title="Kept per the queue's step_bodies setting (failures by default)">Bodies</th>
              </tr>
            </thead>
            <tbody>
              {steps.map((s) => {
                const http = httpSaid(s);
                return (
                <tr key={s.id}>
                  <td class="num">{s.step}</td>
                  <td class="num">{s.attempt}</td>
                  <td>
                    <span class={`badge o-${s.outcome}`}>{s.outcome}</span>
                  </td>
                  <td class="num" title={http.title}>{http.text}</td>
                  <td class="num">{ms(s.duration_ms)}</td>
                  <td title={s.finished_at}>{ago(s.finished_at)}</td>
                  <td class="returned-cell">
                    <Returned step={s} />
                  </td>
                  <td class="error-cell">
                    <ErrorText error={s.error} />
                  </td>
                  <td class="bodies-cell">
                    <Bodies step={s} />
                  </td>
                </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}

      <h3>Signals</h3>
      {LIVE.includes(job.status) && (
        <form class="signal-form" onSubmit={sendSignal} aria-label="Send a signal">
          <label>
            Name <input name="name" required placeholder="approved" />
          </label>
          <label class="grow">
            Payload (JSON) <input name="payload" placeholder='{"by": "ana"}' />
          </label>
          <button type="submit">Send signal</button>
        </form>
      )}
      {signals.length === 0 ? (
        <p class="muted">The inbox is empty.</p>
      ) : (
        <div class="table-wrap">
          <table data-testid="signals">
            <thead>
              <tr>
                <th class="num">#</th>
                <th>Name</th>
                <th>Payload</th>
                <th>Consumed</th>
                <th>Received</th>
              </tr>
            </thead>
            <tbody>
              {signals.map((s) => (
                <tr key={s.id}>
                  <td class="num">{s.seq}</td>
                  <td>{s.name}</td>
                  <td class="ellipsis" title={JSON.stringify(s.payload)}>
                    <code>{JSON.stringify(s.payload)}</code>
                  </td>
                  <td>{s.consumed ? 'yes' : 'pending'}</td>
                  <td title={s.created_at}>{ago(s.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      {(job.parent_id || job.children_total > 0) && <Family job={job} />}
    </section>
  );
}
