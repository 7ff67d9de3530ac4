import { useEffect, useRef, useState } from 'preact/hooks';
import { api, must, type Job, type JobStatus } from '../api';
import { Empty, PollError, Status, ago, usePoll } from '../ui';
import { navigate } from '../router';

const STATUSES = ['', 'runnable', 'executing', 'awaiting', 'done', 'failed', 'cancelled'];

export interface RunsQuery {
  queue?: string;
  status?: string;
  handler?: string;
  key?: string;
  cursor?: string;
}

/** Runs lists jobs newest first, filtered, one keyset page at a time, refreshed live. */
export function Runs({ q }: { q: RunsQuery }) {
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [live, setLive] = useState(true);
  const [loadedAt, setLoadedAt] = useState(0);
  const [shownFor, setShownFor] = useState('');
  const [history, setHistory] = useState<string[]>([]);
  const filterRef = useRef<HTMLInputElement>(null);

  const filterKey = JSON.stringify(q);
  // Live refresh reloads the page the user is on (same filters, same cursor). The query
  // comes from the URL as typed by the user: the API validates it, and a bad value shows
  // as the problem it answers.
  const { error } = usePoll(
    (signal) =>
      must(api.GET('/v1/jobs', {
        params: {
          query: {
            queue: q.queue || undefined,
            status: (q.status || undefined) as JobStatus | undefined,
            handler: q.handler || undefined,
            key: q.key || undefined,
            cursor: q.cursor || undefined,
            limit: 50,
          },
        },
        signal,
      })),
    (page) => {
      setShownFor(filterKey);
      setJobs(page.jobs);
      setNext(page.next_cursor ?? null);
      setLoadedAt(Date.now());
    },
    live ? 3000 : 3_600_000,
    [filterKey, live],
  );

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === '/' && document.activeElement?.tagName !== 'INPUT') {
        e.preventDefault();
        filterRef.current?.focus();
      }
    };
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  }, []);

  // Another filter's rows are shown while this filter's first page loads, not once it failed.
  const rows = error && shownFor !== filterKey ? null : jobs;

  const apply = (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const id = String(f.get('id') || '').trim();
    if (id) return navigate(`/runs/${id}`);
    setHistory([]);
    navigate('/runs', {
      queue: String(f.get('queue') || ''),
      status: String(f.get('status') || ''),
      handler: String(f.get('handler') || ''),
      key: String(f.get('key') || ''),
    });
  };
  const older = () => {
    if (!next) return;
    setHistory([...history, q.cursor ?? '']);
    navigate('/runs', { ...q, cursor: next });
  };
  const newer = () => {
    const prev = history[history.length - 1];
    setHistory(history.slice(0, -1));
    navigate('/runs', { ...q, cursor: prev || undefined });
  };

  return (
    <section>
      <form class="filters" onSubmit={apply} aria-label="Filter runs">
        <label>
          Id <input name="id" inputMode="numeric" size={6} placeholder="42" />
        </label>
        <label>
          Queue <input name="queue" defaultValue={q.queue} ref={filterRef} placeholder="any (press /)" />
        </label>
        <label>
          Status
          <select name="status" defaultValue={q.status} data-testid="status-filter">
            {STATUSES.map((s) => (
              <option value={s}>{s || 'any'}</option>
            ))}
          </select>
        </label>
        <label>
          Handler <input name="handler" defaultValue={q.handler} placeholder="any" />
        </label>
        <label>
          Key <input name="key" defaultValue={q.key} placeholder="any" />
        </label>
        <button type="submit">Filter</button>
        <label class="live">
          <input type="checkbox" checked={live} onChange={(e) => setLive((e.target as HTMLInputElement).checked)} /> Live
        </label>
      </form>
      <PollError error={error} stale={jobs !== null && shownFor === filterKey} />
      {rows && rows.length === 0 && !q.cursor && (
        <Empty title="No runs match">
          <p>Register a handler and insert a first job:</p>
          <pre>{`curl -s -X PUT localhost:8080/v1/handlers/greeter -H 'Content-Type: application/json' \\
  -d '{"url": "http://127.0.0.1:9090/steps"}'
curl -s -X POST localhost:8080/v1/jobs -H 'Content-Type: application/json' \\
  -d '{"handler": "greeter", "input": {"name": "Ada"}}'`}</pre>
        </Empty>
      )}
      {rows && rows.length > 0 && (
        <div class="table-wrap">
          <table class="runs" data-testid="runs">
            <thead>
              <tr>
                <th class="num">Id</th>
                <th>Handler</th>
                <th>Queue</th>
                <th>Status</th>
                <th class="num">Step</th>
                <th class="num">Attempt</th>
                <th>Key</th>
                <th>Created</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((j) => (
                <tr key={j.id} data-job={j.id}>
                  <td class="num">
                    <a href={`#/runs/${j.id}`}>{j.id}</a>
                  </td>
                  <td>{j.handler}</td>
                  <td>{j.queue}</td>
                  <td>
                    <Status status={j.status} />
                  </td>
                  <td class="num">{j.step}</td>
                  <td class="num">
                    {j.attempt}/{j.max_attempts}
                  </td>
                  <td class="ellipsis">{j.key ?? ''}</td>
                  <td title={j.created_at}>{ago(j.created_at, loadedAt)}</td>
                  <td title={j.updated_at}>{ago(j.updated_at, loadedAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <nav class="pager" aria-label="Pages">
        <button onClick={newer} disabled={!q.cursor}>
          ← Newer
        </button>
        <button onClick={older} disabled={!next}>
          Older →
        </button>
        <span class="muted">{loadedAt ? `refreshed ${ago(new Date(loadedAt).toISOString())}` : ''}</span>
      </nav>
    </section>
  );
}
