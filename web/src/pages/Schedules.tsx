import { useState } from 'preact/hooks';
import { api, must, type Job, type Schedule } from '../api';
import { Empty, Fact, Notice, PollError, Status, ago, useNotice, usePoll } from '../ui';
import { navigate } from '../router';

const href = (name: string) => `#/schedules/${encodeURIComponent(name)}`;

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
  return { notice, toggle, remove };
}

function Actions({ schedule, toggle, remove }: { schedule: Schedule; toggle: (s: Schedule) => void; remove: (s: Schedule) => void }) {
  return (
    <div class="actions">
      <button onClick={() => toggle(schedule)}>{schedule.paused ? 'Resume' : 'Pause'}</button>
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
  const { notice, toggle, remove } = useActions(() => refresh());
  if (schedules && schedules.length === 0 && !error) {
    return (
      <section>
        <Notice notice={notice} />
        <Empty title="No schedules yet">PUT /v1/schedules/&#123;name&#125; makes a job on a cron schedule.</Empty>
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
                  <Actions schedule={s} toggle={toggle} remove={remove} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
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
  const { notice, toggle, remove } = useActions((deleted) => (deleted ? navigate('/schedules') : refresh()));
  return (
    <section class="schedule">
      <header class="run-head">
        <h2>
          Schedule {name} {schedule?.paused && <span class="badge s-cancelled">paused</span>}
        </h2>
        {schedule && <Actions schedule={schedule} toggle={toggle} remove={remove} />}
      </header>
      <PollError error={error} stale={schedule !== null} />
      <Notice notice={notice} />
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
