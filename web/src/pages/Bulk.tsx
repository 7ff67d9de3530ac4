// Bulk actions of the runs list: cancel or retry the selected runs (one single-job call
// each, a few at a time), or every run the current filters match (the bulk endpoints,
// batch after batch while the answer says there is more).
import { useRef, useState } from 'preact/hooks';
import { ApiError, api, must, type Job, type JobStatus } from '../api';
import type { RunsQuery } from './Runs';

export type BulkAction = 'cancel' | 'retry';

const LIVE: JobStatus[] = ['runnable', 'executing', 'awaiting'];
const RETRYABLE: JobStatus[] = ['failed', 'cancelled'];

/** CONCURRENCY bounds the single-job calls a selection has in flight at once. */
const CONCURRENCY = 8;

/** BATCH is the limit of one bulk call: one statement on the server, well under its 10 000. */
const BATCH = 1000;

/** BulkReport is what an action did, shown until the next one: a summary and the problems met. */
export interface BulkReport {
  kind: 'ok' | 'error';
  summary: string;
  problems: string[];
}

/** problemText says an ApiError as its problem's title and detail ("Conflict with the current state: …"). */
export function problemText(e: unknown): string {
  if (!(e instanceof ApiError)) return e instanceof Error ? e.message : String(e);
  const title = e.problem?.title ?? (e.status === 0 ? 'Server unreachable' : `HTTP ${e.status}`);
  return e.message && e.message !== title ? `${title}: ${e.message}` : title;
}

/** settleLimited calls fn for every item, at most limit at a time, and returns each outcome in order. */
async function settleLimited<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<PromiseSettledResult<R>[]> {
  const out: PromiseSettledResult<R>[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) {
      try {
        out[i] = { status: 'fulfilled', value: await fn(items[i]) };
      } catch (reason) {
        out[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** countPhrase turns {"already done": 2, "already failed": 1} into "2 already done, 1 already failed". */
function countPhrase(counts: Map<string, number>): string {
  if (counts.size === 1) return [...counts.keys()][0];
  return [...counts].map(([reason, n]) => `${n} ${reason}`).join(', ');
}

/**
 * actOnSelected calls the single-job endpoint of action for every id, CONCURRENCY at a
 * time, and sums up the answers: what changed, the runs the action does not apply to (a
 * 409, grouped by their status: "1 not cancellable: already done"), and every other
 * problem with the runs it hit.
 */
export async function actOnSelected(action: BulkAction, ids: number[], statusOf: (id: number) => JobStatus | undefined): Promise<BulkReport> {
  const results = await settleLimited(ids, CONCURRENCY, (id) =>
    must(action === 'cancel'
      ? api.POST('/v1/jobs/{id}/cancel', { params: { path: { id } } })
      : api.POST('/v1/jobs/{id}/retry', { params: { path: { id } } })));
  let changed = 0;
  let requested = 0;
  const notApplicable = new Map<string, number>();
  const problems = new Map<string, number[]>();
  results.forEach((r, i) => {
    if (r.status === 'fulfilled') {
      const job = r.value as Job;
      if (action === 'cancel' && job.status === 'executing') requested++;
      else changed++;
      return;
    }
    const e = r.reason;
    const status = statusOf(ids[i]);
    const applies = status !== undefined && (action === 'cancel' ? LIVE : RETRYABLE).includes(status);
    if (e instanceof ApiError && e.status === 409 && status && !applies) {
      const reason = action === 'cancel' ? `already ${status}` : status;
      notApplicable.set(reason, (notApplicable.get(reason) ?? 0) + 1);
      return;
    }
    const text = problemText(e);
    problems.set(text, [...(problems.get(text) ?? []), ids[i]]);
  });
  const parts = [`${changed} ${action === 'cancel' ? 'cancelled' : 'retried'}`];
  if (requested) parts.push(`${requested} cancel requested (executing: they end when their step reports)`);
  const skipped = [...notApplicable.values()].reduce((a, b) => a + b, 0);
  if (skipped) parts.push(`${skipped} not ${action === 'cancel' ? 'cancellable' : 'retryable'}: ${countPhrase(notApplicable)}`);
  if (problems.size) parts.push(`${plural([...problems.values()].reduce((a, b) => a + b.length, 0), 'error')}`);
  return {
    kind: problems.size ? 'error' : 'ok',
    summary: parts.join(', '),
    problems: [...problems].map(([text, hit]) => `${text} (${hit.length === 1 ? 'run' : 'runs'} ${hit.join(', ')})`),
  };
}

/** hasFilter tells whether the runs list is narrowed at all: "all matching" needs it to be. */
export function hasFilter(q: RunsQuery): boolean {
  return Boolean(q.queue || q.handler || q.status || q.key);
}

/** refusal says why action cannot take every matching run ("" when it can). */
export function refusal(action: BulkAction, q: RunsQuery): string {
  if (!hasFilter(q)) return 'Set a filter first (queue, handler, status or key): all matching never means every run.';
  const status = q.status as JobStatus | undefined;
  if (action === 'cancel' && status && !LIVE.includes(status)) return `A ${status} run cannot be cancelled: only runnable, executing or awaiting ones.`;
  if (action === 'retry' && status && !RETRYABLE.includes(status)) return `A ${status} run cannot be retried: only failed or cancelled ones.`;
  return '';
}

/** describe states in words what "all matching" takes: "every live run in queue "mail" of handler "send"". */
export function describe(action: BulkAction, q: RunsQuery): string {
  const which = q.status ? `every ${q.status} run` : action === 'cancel' ? 'every live run (runnable, executing or awaiting)' : 'every failed or cancelled run';
  const where = [
    q.queue && `in queue "${q.queue}"`,
    q.handler && `of handler "${q.handler}"`,
    q.key && `whose key starts with "${q.key}"`,
  ].filter(Boolean);
  const tail = action === 'cancel' ? ', with their live children' : '';
  return `${action === 'cancel' ? 'Cancel' : 'Retry'} ${which}${where.length ? ' ' + where.join(' ') : ''}${tail}?`;
}

/** SelectionActions acts on the selected runs, one single-job call each. */
export function SelectionActions({ selected, statusOf, onDone, clear }: {
  selected: number[];
  statusOf: (id: number) => JobStatus | undefined;
  onDone: (report: BulkReport) => void;
  clear: () => void;
}) {
  const [busy, setBusy] = useState<BulkAction | null>(null);
  const act = async (action: BulkAction) => {
    const n = selected.length;
    if (action === 'cancel' && !confirm(`Cancel ${plural(n, 'selected run')} and their live children?`)) return;
    setBusy(action);
    try {
      onDone(await actOnSelected(action, selected, statusOf));
      clear();
    } finally {
      setBusy(null);
    }
  };
  if (selected.length === 0) return null;
  return (
    <div class="bulk selection" data-testid="selection-actions">
      <strong>{selected.length} selected</strong>
      <button class="danger" disabled={busy !== null} onClick={() => act('cancel')}>
        {busy === 'cancel' ? 'Cancelling…' : 'Cancel selected'}
      </button>
      <button disabled={busy !== null} onClick={() => act('retry')}>
        {busy === 'retry' ? 'Retrying…' : 'Retry selected'}
      </button>
      <button class="link" disabled={busy !== null} onClick={clear}>
        clear selection
      </button>
    </div>
  );
}

/**
 * MatchingActions cancels or retries every run the filters match, through the bulk
 * endpoints: a confirm step states the filter in words, then batches of BATCH run until
 * the server says no more match, with the running count shown and a way to stop between
 * batches. With no filter both are refused, and so is an action the status filter rules out.
 */
export function MatchingActions({ q, onDone }: { q: RunsQuery; onDone: (report: BulkReport) => void }) {
  const [asking, setAsking] = useState<BulkAction | null>(null);
  const [running, setRunning] = useState<{ action: BulkAction; changed: number } | null>(null);
  const stop = useRef(false);

  const run = async (action: BulkAction) => {
    setAsking(null);
    stop.current = false;
    const filter = {
      queue: q.queue || undefined,
      handler: q.handler || undefined,
      status: q.status ? [q.status as JobStatus] : undefined,
      key_prefix: q.key || undefined,
    };
    const verb = action === 'cancel' ? 'cancelled' : 'retried';
    let changed = 0;
    setRunning({ action, changed });
    try {
      for (;;) {
        const body = { filter, limit: BATCH };
        const r = await must(action === 'cancel' ? api.POST('/v1/jobs/cancel', { body }) : api.POST('/v1/jobs/retry', { body }));
        changed += r.changed;
        setRunning({ action, changed });
        // A batch that changed nothing cannot make the next one change more: stop rather than spin.
        if (!r.more || r.changed === 0) break;
        if (stop.current) {
          onDone({ kind: 'ok', summary: `Stopped: ${changed} ${verb}; more runs still match.`, problems: [] });
          return;
        }
      }
      onDone({ kind: 'ok', summary: `${changed} ${verb}: all matching done.`, problems: [] });
    } catch (e) {
      onDone({ kind: 'error', summary: `${changed} ${verb} before the server refused a batch.`, problems: [problemText(e)] });
    } finally {
      setRunning(null);
    }
  };

  if (running) {
    return (
      <div class="bulk matching" data-testid="matching-progress" role="status">
        {running.action === 'cancel' ? 'Cancelling' : 'Retrying'} all matching… <strong>{running.changed}</strong> so far
        <button onClick={() => (stop.current = true)}>Stop</button>
      </div>
    );
  }
  if (asking) {
    return (
      <div class="bulk matching confirm" data-testid="matching-confirm" role="alertdialog" aria-label="Confirm">
        <span>{describe(asking, q)}</span>
        <button class={asking === 'cancel' ? 'danger' : ''} onClick={() => run(asking)}>
          {`Yes, ${asking} all matching`}
        </button>
        <button onClick={() => setAsking(null)}>Back</button>
      </div>
    );
  }
  const actions: BulkAction[] = ['cancel', 'retry'];
  return (
    <div class="bulk matching" data-testid="matching-actions">
      {actions.map((a) => {
        const why = refusal(a, q);
        return (
          <button class={a === 'cancel' ? 'danger' : ''} disabled={why !== ''} title={why || describe(a, q)} onClick={() => setAsking(a)}>
            {a === 'cancel' ? 'Cancel all matching' : 'Retry all matching'}
          </button>
        );
      })}
      {!hasFilter(q) && <span class="muted" data-testid="matching-refusal">{refusal('cancel', q)}</span>}
    </div>
  );
}

/** Report shows what the last bulk action did. */
export function Report({ report }: { report: BulkReport | null }) {
  return (
    <div class="notice-slot" role="status" aria-live="polite">
      {report && (
        <div class={`notice ${report.kind}`} data-testid="bulk-report">
          {report.summary}
          {report.problems.length > 0 && (
            <ul class="problems">
              {report.problems.map((p) => (
                <li>{p}</li>
              ))}
            </ul>
          )}
        </div>
      )}
    </div>
  );
}
