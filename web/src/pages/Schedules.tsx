import { useState } from 'preact/hooks';
import { api, must, type Job, type Schedule } from '../api';
import { Empty, Fact, Notice, PollError, Status, ago, useNotice, usePoll } from '../ui';
import { navigate } from '../router';

const href = (name: string) => `#/schedules/${encodeURIComponent(name)}`;

/**
 * ScheduleForm creates a schedule (no schedule given: the name is asked) or edits one
 * (its fields filled in), with PUT /v1/schedules/{name}; the API's problems, per field,
 * come back in the notice. saved is called with the schedule's name.
 */
export function ScheduleForm({ schedule, saved, fail }: {
  schedule?: Schedule;
  saved: (name: string) => Promise<void> | void;
  fail: (e: unknown) => void;
}) {
  const submit = async (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const text = (k: string) => String(f.get(k) ?? '').trim();
    const name = schedule?.name ?? text('name');
    let input: unknown;
    if (text('input')) {
      try {
        input = JSON.parse(text('input'));
      } catch {
        fail(new Error('The input is not valid JSON.'));
        return;
      }
    }
    try {
      await must(api.PUT('/v1/schedules/{name}', { params: { path: { name } }, body: {
        cron: text('cron'),
        timezone: text('timezone') || 'UTC',
        handler: text('handler'),
        queue: text('queue') || undefined,
        input: input as Record<string, never> | undefined,
        overlap: (text('overlap') || 'allow') as 'skip' | 'allow',
        paused: f.get('paused') === 'on',
      } }));
      await saved(name);
    } catch (err) {
      fail(err);
    }
  };
  return (
    <form class="card schedule-form" onSubmit={submit} aria-label={schedule ? 'Edit the schedule' : 'Create a schedule'}>
      <h3>{schedule ? `Edit ${schedule.name}` : 'Create a schedule'}</h3>
      {!schedule && (
        <label>
          Name <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}" placeholder="nightly-report" />
        </label>
      )}
      <label>
        Cron <input name="cron" required defaultValue={schedule?.cron} placeholder="0 2 * * * or @every 1h" size={16} />
      </label>
      <label>
        Timezone <input name="timezone" defaultValue={schedule?.timezone} placeholder="UTC" size={14} />
      </label>
      <label>
        Handler <input name="handler" required defaultValue={schedule?.handler} pattern="[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}" />
      </label>
      <label>
        Queue <input name="queue" defaultValue={schedule?.queue} placeholder="default" />
      </label>
      <label>
        Overlap
        <select name="overlap">
          <option value="allow" selected={(schedule?.overlap ?? 'allow') === 'allow'}>allow</option>
          <option value="skip" selected={schedule?.overlap === 'skip'}>skip</option>
        </select>
      </label>
      <label>
        <input type="checkbox" name="paused" defaultChecked={schedule?.paused} /> Paused
      </label>
      <label class="grow">
        Input (JSON)
        <textarea name="input" rows={3} defaultValue={schedule?.input != null ? JSON.stringify(schedule.input, null, 2) : ''} placeholder="{}" />
      </label>
      <button type="submit">{schedule ? 'Save schedule' : 'Create schedule'}</button>
    </form>
  );
}

// setPaused PUTs the schedule back with paused changed: the API takes the whole schedule.
function setPaused(s: Schedule, paused: boolean) {
  return must(api.PUT('/v1/schedules/{name}', { params: { path: { name: s.name } }, body: {
    cron: s.cron, timezone: s.timezone, handler: s.handler, queue: s.queue, input: s.input ?? undefined,
    overlap: s.overlap, paused,
  } }));
}

// useActions runs pause, resume and delete (confirmed), with a notice, then done().
function useActions(done: (deleted: boolean) => Promise<void> | void) {
  const { notice, ok, fail } = useNotice();
  const run = async (fn: () => Promise<unknown>, said: string, deleted = false) => {
    try {
      await fn();
      ok(said);
      await done(deleted);
    } catch (e) {
      fail(e);
    }
  };
  const toggle = (s: Schedule) =>
    run(() => setPaused(s, !s.paused), s.paused ? `Schedule ${s.name} resumed.` : `Schedule ${s.name} paused: no tick fires until it is resumed.`);
  const remove = (s: Schedule) =>
    confirm(`Delete schedule ${s.name}? Its jobs stay.`) &&
    run(() => must(api.DELETE('/v1/schedules/{name}', { params: { path: { name: s.name } } })), `Schedule ${s.name} deleted.`, true);
  const runNow = async (s: Schedule) => {
    try {
      const j = await must(api.POST('/v1/schedules/{name}/run', { params: { path: { name: s.name } } }));
      ok(`Schedule ${s.name} ran now: run ${j.id}.`);
      await done(false);
    } catch (e) {
      fail(e);
    }
  };
  return { notice, ok, fail, toggle, remove, runNow };
}

function Actions({ schedule, toggle, remove, runNow }: {
  schedule: Schedule;
  toggle: (s: Schedule) => void;
  remove: (s: Schedule) => void;
  runNow: (s: Schedule) => void;
}) {
  return (
    <div class="actions">
      <button onClick={() => toggle(schedule)}>{schedule.paused ? 'Resume' : 'Pause'}</button>
      <button onClick={() => runNow(schedule)} disabled={schedule.paused} title={schedule.paused ? 'resume it to run it' : 'make its job now; the next tick stays'}>
        Run now
      </button>
      <button class="danger" onClick={() => remove(schedule)}>
        Delete
      </button>
    </div>
  );
}

/** Schedules lists every schedule with its next run and last tick, and pauses, resumes or deletes one. */
export function Schedules() {
  const [schedules, setSchedules] = useState<Schedule[] | null>(null);
  const { error, refresh } = usePoll(
    (signal) => must(api.GET('/v1/schedules', { signal })),
    (r) => setSchedules(r.schedules),
    5000,
    [],
  );
  const { notice, ok, fail, toggle, remove, runNow } = useActions(() => refresh());
  const create = <ScheduleForm saved={(name) => navigate(`/schedules/${encodeURIComponent(name)}`)} fail={fail} />;
  void ok;
  if (schedules && schedules.length === 0 && !error) {
    return (
      <section>
        <Notice notice={notice} />
        <Empty title="No schedules yet">A schedule makes a job on a cron schedule: create one below (or PUT /v1/schedules/&#123;name&#125;).</Empty>
        {create}
      </section>
    );
  }
  return (
    <section>
      <PollError error={error} stale={schedules !== null} />
      <Notice notice={notice} />
      <div class="table-wrap">
        <table data-testid="schedules">
          <thead>
            <tr>
              <th>Name</th>
              <th>Cron</th>
              <th>Timezone</th>
              <th>Handler</th>
              <th>Queue</th>
              <th>Next run</th>
              <th>Last tick</th>
              <th>Overlap</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {(schedules ?? []).map((s) => (
              <tr key={s.name} data-schedule={s.name}>
                <td>
                  <a href={href(s.name)}>{s.name}</a>
                  {s.paused && <span class="badge s-cancelled">paused</span>}
                </td>
                <td>
                  <code>{s.cron}</code>
                </td>
                <td>{s.timezone}</td>
                <td>
                  <a href={`#/handlers/${encodeURIComponent(s.handler)}`}>{s.handler}</a>
                </td>
                <td>{s.queue}</td>
                <td title={s.next_run_at}>{s.paused ? '—' : ago(s.next_run_at)}</td>
                <td title={s.last_tick_at ?? ''}>{ago(s.last_tick_at)}</td>
                <td>{s.overlap}</td>
                <td>
                  <Actions schedule={s} toggle={toggle} remove={remove} runNow={runNow} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {create}
    </section>
  );
}

/** ScheduleDetail is one schedule (#/schedules/nightly): its settings, actions and the runs it made, newest first. */
export function ScheduleDetail({ name }: { name: string }) {
  const [schedule, setSchedule] = useState<Schedule | null>(null);
  const [jobs, setJobs] = useState<Job[]>([]);
  const { error, refresh } = usePoll(
    (signal) =>
      Promise.all([
        must(api.GET('/v1/schedules/{name}', { params: { path: { name } }, signal })),
        must(api.GET('/v1/jobs', { params: { query: { schedule: name, limit: 50 } }, signal })),
      ]),
    ([s, page]) => {
      setSchedule(s);
      setJobs(page.jobs);
    },
    5000,
    [name],
  );
  const { notice, ok, fail, toggle, remove, runNow } = useActions((deleted) => (deleted ? navigate('/schedules') : refresh()));
  const [editing, setEditing] = useState(false);
  return (
    <section class="schedule">
      <header class="run-head">
        <h2>
          Schedule {name} {schedule?.paused && <span class="badge s-cancelled">paused</span>}
        </h2>
        {schedule && (
          <div class="actions">
            <Actions schedule={schedule} toggle={toggle} remove={remove} runNow={runNow} />
            <button onClick={() => setEditing(!editing)} aria-expanded={editing}>
              Edit
            </button>
          </div>
        )}
      </header>
      <PollError error={error} stale={schedule !== null} />
      <Notice notice={notice} />
      {schedule && editing && (
        <ScheduleForm
          key={schedule.updated_at}
          schedule={schedule}
          fail={fail}
          saved={async () => {
            ok(`Schedule ${name} saved.`);
            setEditing(false);
            await refresh();
          }}
        />
      )}
      {schedule && (
        <dl class="facts" data-testid="schedule-settings">
          <Fact label="Cron">
            <code>{schedule.cron}</code>
          </Fact>
          <Fact label="Timezone">{schedule.timezone}</Fact>
          <Fact label="Handler">
            <a href={`#/handlers/${encodeURIComponent(schedule.handler)}`}>{schedule.handler}</a>
          </Fact>
          <Fact label="Queue">{schedule.queue}</Fact>
          <Fact label="Overlap">{schedule.overlap}</Fact>
          <Fact label="Next run" title={schedule.next_run_at}>
            {schedule.paused ? 'paused' : ago(schedule.next_run_at)}
          </Fact>
          <Fact label="Last tick" title={schedule.last_tick_at ?? ''}>
            {ago(schedule.last_tick_at)}
          </Fact>
        </dl>
      )}
      <h3>Runs it made</h3>
      {jobs.length === 0 ? (
        <p class="muted">No run yet.</p>
      ) : (
        <div class="table-wrap">
          <table data-testid="schedule-runs">
            <thead>
              <tr>
                <th>Run</th>
                <th>Status</th>
                <th>Tick</th>
                <th>Finished</th>
              </tr>
            </thead>
            <tbody>
              {jobs.map((j) => (
                <tr key={j.id} data-job={j.id}>
                  <td>
                    <a href={`#/runs/${j.id}`}>{j.id}</a>
                  </td>
                  <td>
                    <Status status={j.status} />
                  </td>
                  <td title={j.schedule_tick ?? ''}>{ago(j.schedule_tick)}</td>
                  <td title={j.finished_at ?? ''}>{ago(j.finished_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {jobs.length === 50 && <p class="muted">The 50 newest; GET /v1/jobs?schedule={name} pages through the rest.</p>}
    </section>
  );
}
