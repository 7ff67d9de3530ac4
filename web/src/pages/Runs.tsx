import { useEffect, useRef, useState } from 'preact/hooks';
import { api, must, type Job, type JobStatus } from '../api';
import { Empty, JobBadge, PollError, ago, usePoll } from '../ui';
import { navigate } from '../router';
import { attemptShort } from '../attempts';
import { MatchingActions, Report, SelectionActions, type BulkReport } from './Bulk';

const STATUSES = ['', 'runnable', 'executing', 'awaiting', 'done', 'failed', 'cancelled'];

export interface RunsQuery {
  queue?: string;
  status?: string;
  handler?: string;
  key?: string;
  /** fairness_key: the runs of one fairness key ("" the default key of a fair queue). */
  fairness_key?: string;
  /** contains: JSON the input contains; within: the window searched (1h, 24h, 7d). */
  contains?: string;
  within?: string;
  cursor?: string;
}

/** WINDOWS are the time windows a search by input may read (the API allows 7 days at most). */
const WINDOWS: Record<string, number> = { '1h': 3_600_000, '24h': 86_400_000, '7d': 7 * 86_400_000 - 60_000 };

/** filterLink is the shareable address of the runs that match one more filter. */
function filterLink(q: RunsQuery, field: 'handler' | 'key' | 'queue', value: string): string {
  const next = new URLSearchParams();
  for (const [k, v] of Object.entries({ ...q, cursor: undefined, [field]: value })) if (v) next.set(k, v);
  return `#/runs?${next.toString()}`;
}

/** useNames reads the handler and queue names once, to offer them in the filters. */
function useNames(): { handlers: string[]; queues: string[] } {
  const [names, setNames] = useState<{ handlers: string[]; queues: string[] }>({ handlers: [], queues: [] });
  useEffect(() => {
    const ctl = new AbortController();
    Promise.all([must(api.GET('/v1/handlers', { signal: ctl.signal })), must(api.GET('/v1/queues', { signal: ctl.signal }))])
      .then(([h, qs]) => setNames({ handlers: h.handlers.map((x) => x.name), queues: qs.queues.map((x) => x.name) }))
      .catch(() => {}); // only suggestions: the list itself shows a failing API
    return () => ctl.abort();
  }, []);
  return names;
}

/**
 * Runs lists jobs newest first, filtered, one keyset page at a time, refreshed live. The
 * filters and the page are the URL (#/runs?handler=charge&status=failed): a link shares
 * them, and back and forward move between them.
 */
export function Runs({ q }: { q: RunsQuery }) {
  const names = useNames();
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [live, setLive] = useState(true);
  const [loadedAt, setLoadedAt] = useState(0);
  const [shownFor, setShownFor] = useState('');
  const [history, setHistory] = useState<string[]>([]);
  const filterRef = useRef<HTMLInputElement>(null);
  // The selection is the ids ticked with the status each had when last shown; another
  // filter starts a new one (a selection the rows no longer show would act unseen).
  const [selected, setSelected] = useState<Map<number, JobStatus>>(new Map());
  const [report, setReport] = useState<BulkReport | null>(null);

  const filterKey = JSON.stringify(q);
  useEffect(() => setSelected(new Map()), [JSON.stringify({ ...q, cursor: undefined })]);
  // Live refresh reloads the page the user is on (same filters, same cursor). The query
  // comes from the URL as typed by the user: the API validates it, and a bad value shows
  // as the problem it answers.
  const { error, refresh } = usePoll(
    (signal) =>
      must(api.GET('/v1/jobs', {
        params: {
          query: {
            queue: q.queue || undefined,
            status: (q.status || undefined) as JobStatus | undefined,
            handler: q.handler || undefined,
            key: q.key || undefined,
            fairness_key: q.fairness_key ?? undefined,
            input_contains: q.contains || undefined,
            created_after: q.contains ? new Date(Date.now() - (WINDOWS[q.within ?? '24h'] ?? WINDOWS['24h'])).toISOString() : undefined,
            cursor: q.cursor || undefined,
            limit: 50,
          },
        },
        signal,
      })),
    (page) => {
      setShownFor(filterKey);
      setJobs(page.jobs);
      setSelected((sel) => {
        if (!page.jobs.some((j) => sel.has(j.id) && sel.get(j.id) !== j.status)) return sel;
        const fresh = new Map(sel);
        for (const j of page.jobs) if (fresh.has(j.id)) fresh.set(j.id, j.status);
        return fresh;
      });
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
    const id = String(f.get('id') || '').trim().replace(/^#/, '');
    if (id) return navigate(`/runs/${id}`);
    setHistory([]);
    navigate('/runs', {
      queue: String(f.get('queue') || ''),
      status: String(f.get('status') || ''),
      handler: String(f.get('handler') || ''),
      key: String(f.get('key') || ''),
      // kept while its field is shown ("" is a key too: the default one)
      ...(f.has('fairness_key') ? { fairness_key: String(f.get('fairness_key')) } : {}),
      contains: String(f.get('contains') || '').trim(),
      // The window only means something with a search: no search, no within in the URL.
      within: String(f.get('contains') || '').trim() ? String(f.get('within') || '') : '',
    }, ['fairness_key']);
  };
  const toggle = (jobs: Job[], on: boolean) => {
    const next = new Map(selected);
    for (const j of jobs) on ? next.set(j.id, j.status) : next.delete(j.id);
    setSelected(next);
  };
  const allOnPage = rows !== null && rows.length > 0 && rows.every((j) => selected.has(j.id));
  const someOnPage = rows !== null && rows.some((j) => selected.has(j.id));
  const done = (r: BulkReport) => {
    setReport(r);
    void refresh();
  };

  const older = () => {
    if (!next) return;
    setHistory([...history, q.cursor ?? '']);
    navigate('/runs', { ...q, cursor: next }, ['fairness_key']);
  };
  const newer = () => {
    const prev = history[history.length - 1];
    setHistory(history.slice(0, -1));
    navigate('/runs', { ...q, cursor: prev || undefined }, ['fairness_key']);
  };

  return (
    <section>
      {/* Keyed by the filters: back and forward (a new URL) show its values in the fields. */}
      <form class="filters" key={filterKey} onSubmit={apply} aria-label="Filter runs">
        <label>
          Id <input name="id" inputMode="numeric" size={6} placeholder="42" pattern="#?[0-9]+" title="a run's id, e.g. 42" />
        </label>
        <label>
          Queue <input name="queue" defaultValue={q.queue} ref={filterRef} placeholder="any (press /)" list="queue-names" />
        </label>
        <label>
          Status
          {/* A select has no defaultValue: the option from the URL is the selected one. */}
          <select name="status" data-testid="status-filter">
            {STATUSES.map((s) => (
              <option value={s} selected={s === (q.status ?? '')}>
                {s || 'any'}
              </option>
            ))}
          </select>
        </label>
        <label>
          Handler <input name="handler" defaultValue={q.handler} placeholder="any" list="handler-names" />
        </label>
        <label>
          Key <input name="key" defaultValue={q.key} placeholder="any" />
        </label>
        {q.fairness_key !== undefined && (
          <label>
            Fairness key{' '}
            <input name="fairness_key" defaultValue={q.fairness_key} placeholder="(no key)" data-testid="fairness-key-filter" size={10} />
          </label>
        )}
        <label>
          Input contains{' '}
          <input name="contains" defaultValue={q.contains} placeholder='{"customer": "c-7"}' size={18} title="JSON the input contains (JSON containment)" />
        </label>
        <label>
          within
          <select name="within" title="the window a search reads (created in the last …)">
            {Object.keys(WINDOWS).map((w) => (
              <option value={w} selected={w === (q.within ?? '24h')}>
                {w}
              </option>
            ))}
          </select>
        </label>
        <button type="submit">Filter</button>
        {(q.queue || q.status || q.handler || q.key || q.contains || q.fairness_key !== undefined) && (
          <a href="#/runs" class="clear">
            clear filters
          </a>
        )}
        <datalist id="queue-names">
          {names.queues.map((n) => (
            <option value={n} />
          ))}
        </datalist>
        <datalist id="handler-names">
          {names.handlers.map((n) => (
            <option value={n} />
          ))}
        </datalist>
        <label class="live">
          <input type="checkbox" checked={live} onChange={(e) => setLive((e.target as HTMLInputElement).checked)} /> Live
        </label>
      </form>
      <PollError error={error} stale={jobs !== null && shownFor === filterKey} />
      <div class="bulk-bar">
        <SelectionActions selected={[...selected.keys()]} statusOf={(id) => selected.get(id)} onDone={done} clear={() => setSelected(new Map())} />
        {/* The bulk filter has no payload search: acting on "every matching run" would reach past the search. */}
        {!q.contains && <MatchingActions q={q} onDone={done} />}
      </div>
      <Report report={report} />
      {rows && rows.length === 0 && !q.cursor && (q.queue || q.status || q.handler || q.key || q.contains) && (
        <Empty title="No runs match these filters">
          <p>
            Keys and names match exactly. <a href="#/runs">Show every run</a>.
          </p>
        </Empty>
      )}
      {rows && rows.length === 0 && !q.cursor && !(q.queue || q.status || q.handler || q.key || q.contains) && (
        <Empty title="No runs yet">
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
                <th class="select">
                  <input
                    type="checkbox"
                    aria-label="Select every run on this page"
                    data-testid="select-page"
                    checked={allOnPage}
                    indeterminate={someOnPage && !allOnPage}
                    onChange={(e) => toggle(rows, (e.target as HTMLInputElement).checked)}
                  />
                </th>
                <th class="num">Id</th>
                <th>Handler</th>
                <th>Queue</th>
                <th>Status</th>
                <th class="num" title="steps completed">Steps</th>
                <th class="num" title="attempts of the current step">Attempt</th>
                <th>Key</th>
                <th>Created</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((j) => (
                <tr key={j.id} data-job={j.id} class={selected.has(j.id) ? 'selected' : ''}>
                  <td class="select">
                    <input
                      type="checkbox"
                      aria-label={`Select run ${j.id}`}
                      checked={selected.has(j.id)}
                      onChange={(e) => toggle([j], (e.target as HTMLInputElement).checked)}
                    />
                  </td>
                  <td class="num">
                    <a href={`#/runs/${j.id}`}>{j.id}</a>
                  </td>
                  <td>
                    <a class="quiet" href={filterLink(q, 'handler', j.handler)} title={`runs of ${j.handler}`}>
                      {j.handler}
                    </a>
                  </td>
                  <td>
                    <a class="quiet" href={filterLink(q, 'queue', j.queue)} title={`runs in ${j.queue}`}>
                      {j.queue}
                    </a>
                  </td>
                  <td>
                    <JobBadge job={j} now={loadedAt || undefined} />
                  </td>
                  <td class="num">{j.step}</td>
                  <td class="num" title={attemptShort(j).title}>
                    {attemptShort(j).text}
                  </td>
                  <td class="ellipsis">
                    {j.key && (
                      <a class="quiet" href={filterLink(q, 'key', j.key)} title={`runs with key ${j.key}`}>
                        {j.key}
                      </a>
                    )}
                  </td>
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
