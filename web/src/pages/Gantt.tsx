import { useState } from 'preact/hooks';
import { api, must, type Job, type JobDetail, type JobWait, type Step } from '../api';
import { PollError, usePoll } from '../ui';
import { KIND_LABEL, callOK, dur, hasFlowControl, segmentsOf, span, type Segment, type SegmentKind } from '../timeline';

/** CHILDREN_DRAWN bounds the children drawn under a run (one history request each). */
const CHILDREN_DRAWN = 20;

interface Row {
  job: Job;
  steps: Step[];
  depth: number;
}

/** Bar is one segment, placed in percent of the axis; a gap wide enough carries its label. */
function Bar({ s, lo, width }: { s: Segment; lo: number; width: number }) {
  const left = ((s.start - lo) / width) * 100;
  const w = ((s.end - s.start) / width) * 100;
  const kind = s.kind === 'call' ? (callOK(s.outcome) ? 'call ok' : 'call err') : s.kind;
  const title = `${s.label} · ${dur(s.end - s.start)}`;
  const text = s.kind === 'call' || s.kind === 'running' ? `${s.step}.${s.attempt}` : `${s.label} ${dur(s.end - s.start)}`;
  return (
    <div
      class={`seg ${kind}`}
      data-kind={s.kind}
      data-outcome={s.outcome}
      data-start={s.start}
      data-end={s.end}
      style={{ left: `${left}%`, width: `${w}%` }}
      title={title}
      aria-label={title}
    >
      {/* The text is clipped by the bar: a short gap keeps its label in the title. */}
      <span>{text}</span>
    </div>
  );
}

function Legend({ kinds }: { kinds: Set<SegmentKind> }) {
  return (
    <ul class="gantt-legend">
      {[...kinds].map((k) => (
        <li>
          <span class={`swatch seg ${k === 'call' ? 'call ok' : k}`} /> {KIND_LABEL[k]}
        </li>
      ))}
      {kinds.has('call') && (
        <li>
          <span class="swatch seg call err" /> webhook call that failed
        </li>
      )}
    </ul>
  );
}

/**
 * Gantt draws a run, and its children nested under it, as bars on one time axis: each
 * attempt's webhook call, and the waits between them (queued, waiting for a slot or a rate
 * limit, backoff, awaiting a signal, waiting for children), labelled. It reads the history
 * rows the API returns: the run's (given), and its newest CHILDREN_DRAWN children's, and
 * for those with flow control their waits, refreshed with the page.
 */
export function Gantt({ job, steps }: { job: JobDetail; steps: Step[] }) {
  const [children, setChildren] = useState<Row[]>([]);
  const [more, setMore] = useState(false);
  const [waits, setWaits] = useState<Record<number, JobWait[]>>({});
  const { error } = usePoll(
    async (signal) => {
      let kids: Job[] = [];
      let rows: Row[] = [];
      let more = false;
      if (job.children_total > 0) {
        const page = await must(api.GET('/v1/jobs/{id}/children', { params: { path: { id: job.id }, query: { limit: CHILDREN_DRAWN } }, signal }));
        kids = [...page.jobs].sort((a, b) => a.id - b.id);
        const hist = await Promise.all(kids.map((k) => must(api.GET('/v1/jobs/{id}/steps', { params: { path: { id: k.id } }, signal }))));
        rows = kids.map((k, i) => ({ job: k, steps: hist[i].steps, depth: 1 }));
        more = !!page.next_cursor;
      }
      // Only a job with a concurrency key or a rate limit can wait for a slot or a token.
      const flow = [job, ...kids].filter(hasFlowControl);
      const got = await Promise.all(flow.map((j) => must(api.GET('/v1/jobs/{id}/waits', { params: { path: { id: j.id } }, signal }))));
      const waits: Record<number, JobWait[]> = {};
      flow.forEach((j, i) => (waits[j.id] = got[i].waits));
      return { rows, more, waits };
    },
    (r) => {
      setChildren(r.rows);
      setMore(r.more);
      setWaits(r.waits);
    },
    2000,
    [job.id, job.status, job.step, job.attempt, job.children_total, job.children_finished],
  );
  const now = Date.now();
  const rows: Row[] = [{ job, steps, depth: 0 }, ...children];
  const segs = rows.map((r) => segmentsOf(r.job, r.steps, now, waits[r.job.id]));
  const [lo, hi] = span(segs, new Date(job.created_at).getTime());
  const width = hi - lo;
  const kinds = new Set<SegmentKind>(segs.flat().map((s) => s.kind));
  const ticks = [0, 0.25, 0.5, 0.75, 1];
  return (
    <div class="gantt" data-testid="gantt">
      <PollError error={error} stale />
      <div class="gantt-row gantt-axis" aria-hidden="true">
        <div class="gantt-name" />
        <div class="gantt-track">
          {ticks.map((f) => (
            <span class="tick" style={{ left: `${f * 100}%` }}>
              +{dur(f * width)}
            </span>
          ))}
        </div>
      </div>
      {rows.map((r, i) => (
        <div class={`gantt-row depth-${r.depth}`} data-job={r.job.id} key={r.job.id}>
          <div class="gantt-name">
            {r.depth > 0 ? (
              <a href={`#/runs/${r.job.id}`} title={`${r.job.handler}: ${r.job.status}`}>
                ↳ {r.job.id} {r.job.handler}
              </a>
            ) : (
              <span title={`${r.job.handler}: ${r.job.status}`}>
                {r.job.id} {r.job.handler}
              </span>
            )}
          </div>
          <div class="gantt-track">
            {segs[i].map((s) => (
              <Bar s={s} lo={lo} width={width} />
            ))}
          </div>
        </div>
      ))}
      {more && <p class="muted">The {CHILDREN_DRAWN} newest children are drawn; the Family below lists them all.</p>}
      <Legend kinds={kinds} />
    </div>
  );
}
