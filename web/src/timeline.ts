// A run as segments on a time axis, derived from what the API already returns: the job
// (created_at, status, eligible_at, its flow-control settings) and its history rows (one
// per attempt, with started_at and finished_at). An attempt's bar is its webhook call,
// from the claim to the outcome; the gap before it is named by what ended the attempt
// before it (or by the insert, for the first):
//
//   before the gap              the gap
//   the insert, a next          queued; split by the job's waits (GET /v1/jobs/{id}/waits,
//                               derived by the server from the other jobs' history) into
//                               waiting for a slot of its concurrency key and waiting for
//                               its rate limit where they say so
//   an await                    awaiting a signal (or its timeout)
//   a spawn                     waiting for children
//   a retry, any failure        backoff
//   the end of a run            finished, until retried or replayed (the next attempt is a
//                               first attempt of a step at or before the last one's)
//
// A live job's last segment runs to now: executing, awaiting, waiting for children,
// delayed (eligible later: a delay or a backoff) or queued.
import type { Job, JobWait, Step } from './api';

export type SegmentKind = 'queued' | 'slot' | 'ratelimit' | 'backoff' | 'delayed' | 'await' | 'children' | 'ended' | 'call' | 'running';

export interface Segment {
  kind: SegmentKind;
  start: number; // ms since the epoch
  end: number;
  label: string;
  /** outcome of a call ('next', 'http_error', …); absent for gaps. */
  outcome?: string;
  step?: number;
  attempt?: number;
}

const ANSWERED_OK = new Set(['next', 'await', 'spawn', 'done']);

/** callOK tells a call that moved the job on (or finished it) from one that failed. */
export function callOK(outcome?: string): boolean {
  return outcome !== undefined && ANSWERED_OK.has(outcome);
}

export const KIND_LABEL: Record<SegmentKind, string> = {
  queued: 'queued',
  slot: 'waiting for a slot (its concurrency key is full)',
  ratelimit: 'waiting for its rate limit',
  backoff: 'backoff',
  delayed: 'delayed',
  await: 'awaiting a signal',
  children: 'waiting for children',
  ended: 'finished, until retried or replayed',
  call: 'webhook call',
  running: 'webhook call (running)',
};

/** hasFlowControl tells a job whose queued waits may be waits for a slot or a token. */
export function hasFlowControl(job: Pick<Job, 'concurrency_key' | 'rate_limits'>): boolean {
  return !!job.concurrency_key || (!!job.rate_limits && job.rate_limits.length > 0);
}

function queuedKind(): SegmentKind {
  return 'queued';
}

function gapAfter(outcome: string | undefined): SegmentKind {
  if (outcome === undefined || outcome === 'next') return queuedKind();
  if (outcome === 'await') return 'await';
  if (outcome === 'spawn') return 'children';
  return 'backoff';
}

const t = (iso: string) => new Date(iso).getTime();

const WAIT_KIND: Record<JobWait['kind'], SegmentKind> = { slot: 'slot', rate_limit: 'ratelimit' };

/**
 * splitQueued cuts each queued segment where the job's waits cover it: a part within a
 * slot wait becomes 'slot', else within a rate-limit wait 'ratelimit', the rest stays
 * queued. Other gaps (backoff, awaiting, …) are not the queue's and stay as they are.
 */
export function splitQueued(segs: Segment[], waits: JobWait[]): Segment[] {
  if (waits.length === 0) return segs;
  const ws = waits.map((w) => ({ kind: WAIT_KIND[w.kind], start: t(w.start), end: t(w.end) }));
  const out: Segment[] = [];
  for (const s of segs) {
    if (s.kind !== 'queued') {
      out.push(s);
      continue;
    }
    const cuts = new Set<number>([s.start, s.end]);
    for (const w of ws) for (const x of [w.start, w.end]) if (x > s.start && x < s.end) cuts.add(x);
    const at = [...cuts].sort((a, b) => a - b);
    for (let i = 0; i + 1 < at.length; i++) {
      const [a, b] = [at[i], at[i + 1]];
      const covering = ws.filter((w) => w.start <= a && w.end >= b).map((w) => w.kind);
      const kind: SegmentKind = covering.includes('slot') ? 'slot' : covering.includes('ratelimit') ? 'ratelimit' : 'queued';
      const last = out[out.length - 1];
      if (last && last.kind === kind && last.end === a) last.end = b;
      else out.push({ kind, start: a, end: b, label: KIND_LABEL[kind] });
    }
  }
  return out;
}

/**
 * segmentsOf lays out one job's history; now closes a live job's last segment, and waits
 * (from GET /v1/jobs/{id}/waits) name the parts of its queued gaps that waited for a slot
 * or a rate limit.
 */
export function segmentsOf(job: Job, steps: Step[], now: number, waits: JobWait[] = []): Segment[] {
  return splitQueued(layout(job, steps, now), waits);
}

function layout(job: Job, steps: Step[], now: number): Segment[] {
  const out: Segment[] = [];
  let cursor = t(job.created_at);
  let before: string | undefined;
  const gap = (kind: SegmentKind, end: number) => {
    if (end > cursor) out.push({ kind, start: cursor, end, label: KIND_LABEL[kind] });
  };
  let prev: Step | undefined;
  for (const s of steps) {
    const start = t(s.started_at);
    const end = Math.max(t(s.finished_at), start);
    // A first attempt of a step at or before the last one's is a new run: a retry of the
    // failed or cancelled job, or a replay (a backoff's next attempt counts on).
    const again = prev !== undefined && s.attempt === 1 && (s.step <= prev.step || prev.outcome === 'done');
    gap(again ? 'ended' : gapAfter(before), start);
    prev = s;
    out.push({
      kind: 'call', start, end, outcome: s.outcome, step: s.step, attempt: s.attempt,
      label: `step ${s.step}, attempt ${s.attempt}: ${s.outcome}`,
    });
    cursor = Math.max(cursor, end);
    before = s.outcome;
  }
  const end = job.finished_at ? t(job.finished_at) : now;
  switch (job.status) {
    case 'executing': {
      const claimed = job.attempted_at ? t(job.attempted_at) : cursor;
      gap(gapAfter(before), claimed);
      if (now > cursor) out.push({ kind: 'running', start: cursor, end: now, label: `step ${job.step}, attempt ${job.attempt}: running` });
      break;
    }
    case 'awaiting':
      gap(job.pending_children > 0 ? 'children' : 'await', now);
      break;
    case 'runnable': {
      const eligible = job.eligible_at ? t(job.eligible_at) : cursor;
      if (eligible > now) {
        gap(before === undefined || before === 'next' ? 'delayed' : 'backoff', now);
      } else {
        gap(gapAfter(before), Math.max(cursor, Math.min(eligible, now)));
        gap(queuedKind(), now);
      }
      break;
    }
    default:
      // Finished: a job cancelled while it waited ends with that wait.
      gap(gapAfter(before), end);
  }
  return out;
}

/** span is the time range of a set of segment lists (at least 1 ms wide). */
export function span(rows: Segment[][], floor: number): [number, number] {
  let lo = floor;
  let hi = floor;
  for (const r of rows) for (const s of r) {
    lo = Math.min(lo, s.start);
    hi = Math.max(hi, s.end);
  }
  return [lo, Math.max(hi, lo + 1)];
}

/** dur says a duration briefly: 850 ms, 2.4 s, 3m 10s, 2h 5m. */
export function dur(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)}m ${Math.round((ms % 60_000) / 1000)}s`;
  return `${Math.floor(ms / 3_600_000)}h ${Math.round((ms % 3_600_000) / 60_000)}m`;
}
