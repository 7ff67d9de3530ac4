import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { api, must, type Job, type JobDetail, type Signal, type Step } from '../api';
import { Json, Notice, PollError, Status, ago, ms, useNotice, usePoll } from '../ui';

const LIVE = ['runnable', 'executing', 'awaiting'];

function errorText(e: unknown): string {
  if (e === null || e === undefined) return '';
  if (typeof e === 'object' && e && 'message' in e) return String((e as { message: unknown }).message);
  return JSON.stringify(e);
}

function Fact({ label, title, children }: { label: string; title?: string; children: ComponentChildren }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd title={title}>{children}</dd>
    </div>
  );
}

/** Run shows one job: its data, step timeline, inbox, family, and the actions on it. */
export function Run({ id }: { id: number }) {
  const [job, setJob] = useState<JobDetail | null>(null);
  const [steps, setSteps] = useState<Step[]>([]);
  const [signals, setSignals] = useState<Signal[]>([]);
  const [children, setChildren] = useState<Job[]>([]);
  const { notice, ok, fail } = useNotice();

  const { error, refresh } = usePoll(
    (signal) => {
      const path = { params: { path: { id } }, signal };
      return Promise.all([
        must(api.GET('/v1/jobs/{id}', path)),
        must(api.GET('/v1/jobs/{id}/steps', path)),
        must(api.GET('/v1/jobs/{id}/signals', path)),
        must(api.GET('/v1/jobs/{id}/children', { params: { path: { id }, query: { limit: 100 } }, signal })),
      ]);
    },
    ([j, st, sg, ch]) => {
      setJob(j);
      setSteps(st.steps);
      setSignals(sg.signals);
      setChildren(ch.jobs);
    },
    2000,
    [id],
  );

  if (!job) return error ? <PollError error={error} /> : <p class="muted">Loading…</p>;

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
          Run {job.id} <span class="muted">{job.handler}</span> <Status status={job.status} />
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
      <dl class="facts">
        <Fact label="Queue">{job.queue}</Fact>
        <Fact label="Key">{job.key ?? '—'}</Fact>
        <Fact label="Step">{job.step}</Fact>
        <Fact label="Attempt">
          {job.attempt} of {job.max_attempts}
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
        {job.parent_id && (
          <Fact label="Parent">
            <a href={`#/runs/${job.parent_id}`}>run {job.parent_id}</a>
          </Fact>
        )}
      </dl>
      <div class="json-grid">
        <Json label="Input" value={job.input} open />
        <Json label="State" value={job.state} open />
        <Json label="Result" value={job.result} open />
        <Json label="Error" value={job.error} open />
      </div>

      <h3>Timeline</h3>
      {steps.length === 0 ? (
        <p class="muted">No attempt has finished yet.</p>
      ) : (
        <div class="table-wrap">
          <table data-testid="timeline">
            <thead>
              <tr>
                <th class="num">Step</th>
                <th class="num">Attempt</th>
                <th>Outcome</th>
                <th class="num">HTTP</th>
                <th class="num">Duration</th>
                <th>Finished</th>
                <th>Error</th>
              </tr>
            </thead>
            <tbody>
              {steps.map((s) => (
                <tr key={s.id}>
                  <td class="num">{s.step}</td>
                  <td class="num">{s.attempt}</td>
                  <td>
                    <span class={`badge o-${s.outcome}`}>{s.outcome}</span>
                  </td>
                  <td class="num">{s.http_status ?? '—'}</td>
                  <td class="num">{ms(s.duration_ms)}</td>
                  <td title={s.finished_at}>{ago(s.finished_at)}</td>
                  <td class="ellipsis" title={errorText(s.error)}>
                    {errorText(s.error)}
                  </td>
                </tr>
              ))}
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
                  <td class="ellipsis">
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

      {(children.length > 0 || job.children_total > 0) && (
        <>
          <h3>
            Children <span class="muted">{job.children_finished} of {job.children_total} finished</span>
          </h3>
          <div class="table-wrap">
            <table>
              <tbody>
                {children.map((c) => (
                  <tr key={c.id}>
                    <td class="num">
                      <a href={`#/runs/${c.id}`}>{c.id}</a>
                    </td>
                    <td>{c.handler}</td>
                    <td>
                      <Status status={c.status} />
                    </td>
                    <td title={c.updated_at}>{ago(c.updated_at)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}
