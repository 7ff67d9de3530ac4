// What a job's attempt counter and a step's HTTP status mean, said in words. The API's
// `attempt` counts the attempts of the job's current step: it is 0 once a step completed
// and the next one has not started; a finished job keeps its last step's attempts
// (jobs finished before that rule show 0, and their timeline says it). A step's `http_status` is what its webhook answered: 202
// for an asynchronous step (its outcome came through POST /v1/jobs/{id}/outcome), none
// when no answer came or no call was made.
import type { Job, Step } from './api';

const LIVE = new Set(['runnable', 'executing', 'awaiting']);

/** ANSWERS are the outcomes a handler chose (the others are failures the service saw). */
const ANSWERS = new Set(['next', 'await', 'spawn', 'done', 'fail', 'retry']);

/** NO_ANSWER are the failures where the call was made and no answer came back. */
const NO_ANSWER = new Set(['timeout', 'connection_error', 'lease_expired', 'bad_response']);

export interface Said {
  text: string;
  title: string;
}

/**
 * attemptSaid describes a job's attempts for its page. last is the newest row of its
 * timeline, when the page has it (undefined when the timeline is empty or truncated).
 */
export function attemptSaid(job: Job, last?: Step): Said {
  const max = job.max_attempts;
  if (job.attempt > 0) {
    if (job.status === 'executing') return { text: `${job.attempt} of ${max}, running`, title: `attempt ${job.attempt} of step ${job.step} is running` };
    if (job.status === 'runnable') {
      return { text: `${job.attempt} of ${max} used`, title: `step ${job.step} failed ${job.attempt} time(s); it runs again when eligible` };
    }
    return { text: `${job.attempt} of ${max}`, title: `step ${job.step} ended after ${job.attempt} attempt(s)` };
  }
  if (LIVE.has(job.status)) return { text: `none yet (up to ${max})`, title: `step ${job.step} has not been attempted yet` };
  if (last) {
    return { text: `${last.attempt} of ${max} (last step)`, title: `the job's last step, step ${last.step}, took ${last.attempt} attempt(s)` };
  }
  return { text: '—', title: 'no attempt was made' };
}

/** attemptShort is the runs list's cell: attempts of the current (or a finished job's last) step. */
export function attemptShort(job: Job): Said {
  if (job.attempt > 0 || LIVE.has(job.status)) {
    return { text: `${job.attempt}/${job.max_attempts}`, title: `attempts of step ${job.step}, of at most ${job.max_attempts}` };
  }
  return { text: '—', title: 'finished: the attempts of each step are in its timeline' };
}

/** httpSaid describes what one attempt's webhook call answered. */
export function httpSaid(s: Step): Said {
  const answered = ANSWERS.has(s.outcome);
  if (s.http_status === 202 && answered) {
    return { text: '202 async', title: 'the handler answered 202 and reported this outcome through the API' };
  }
  if (s.http_status !== null && s.http_status !== undefined) return { text: String(s.http_status), title: `the handler answered ${s.http_status}` };
  if (answered) return { text: 'async', title: 'the outcome came through the API (an asynchronous step)' };
  if (NO_ANSWER.has(s.outcome)) return { text: 'no answer', title: 'the call was made and no HTTP answer came back' };
  return { text: 'not sent', title: 'no webhook call was made for this attempt' };
}

/** errorMessage is an error's message when it has one, otherwise its JSON. */
export function errorMessage(e: unknown): string {
  if (e === null || e === undefined) return '';
  if (typeof e === 'object' && 'message' in e) return String((e as { message: unknown }).message);
  if (typeof e === 'string') return e;
  return JSON.stringify(e);
}

/** errorDetail is the rest of an error beyond its message (null when there is none). */
export function errorDetail(e: unknown): Record<string, unknown> | null {
  if (e === null || typeof e !== 'object' || Array.isArray(e) || !('message' in e)) return null;
  const rest = { ...(e as Record<string, unknown>) };
  delete rest.message;
  return Object.keys(rest).length ? rest : null;
}
