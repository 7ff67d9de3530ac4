// A run as segments on a time axis, derived from what the API already returns: the job
// (created_at, status, eligible_at, its flow-control settings) and its history rows (one
// per attempt, with started_at and finished_at). An attempt's bar is its webhook call,
// from the claim to the outcome; the gap before it is named by what ended the attempt
// before it (or by the insert, for the first):
//
//   before the gap              the gap
//   the insert, a next          queued (with a concurrency key or rate limits: or waiting for a slot / a token)
//   an await                    awaiting a signal (or its timeout)
//   a spawn                     waiting for children
//   a retry, any failure        backoff
//   the end of a run            finished, until retried or replayed (the next attempt is a
//                               first attempt of a step at or before the last one's)
//
// A live job's last segment runs to now: executing, awaiting, waiting for children,
// delayed (eligible later: a delay or a backoff) or queued.
import type { Job, Step } from './api';

export type SegmentKind = 'queued' | 'slot' | 'backoff' | 'delayed' | 'await' | 'children' | 'ended' | 'call' | 'running';

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
  slot: 'queued or waiting for a slot / rate limit',
  backoff: 'backoff',
  delayed: 'delayed',
  await: 'awaiting a signal',
  children: 'waiting for children',
  ended: 'finished, until retried or replayed',
  call: 'webhook call',
  running: 'webhook call (running)',
};

type Flow = Pick<Job, 'concurrency_key' | 'rate_limits'>;

function queuedKind(job: Flow): SegmentKind {
  return job.concurrency_key || (job.rate_limits && job.rate_limits.length > 0) ? 'slot' : 'queued';
}

function gapAfter(outcome: string | undefined, job: Flow): SegmentKind {
  if (outcome === undefined || outcome === 'next') return queuedKind(job);
  if (outcome === 'await') return 'await';
  if (outcome === 'spawn') return 'children';
  return 'backoff';
}

const t = (iso: string) => new Date(iso).getTime();

/** segmentsOf lays out one job's history; now closes a live job's last segment. */
export function segmentsOf(job: Job, steps: Step[], now: number): Segment[] {
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
    gap(again ? 'ended' : gapAfter(before, job), start);
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
      gap(gapAfter(before, job), claimed);
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
        gap(gapAfter(before, job), Math.max(cursor, Math.min(eligible, now)));
        gap(queuedKind(job), now);
      }
      break;
    }
    default:
      // Finished: a job cancelled while it waited ends with that wait.
      gap(gapAfter(before, job), end);
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
