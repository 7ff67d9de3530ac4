import { useState } from 'preact/hooks';
import { api, must, type JobDetail, type Step } from '../api';
import { navigate } from '../router';

/** lastStep is the step a finished job ended at (a done job counts its last one as completed). */
export function lastStep(job: JobDetail): number {
  return job.status === 'done' && job.step > 0 ? job.step - 1 : job.step;
}

/**
 * recordedState is the state step ran with, as the API's replay would take it: null for
 * step 0, the job's own for the step it ended at, else the job.state of the newest kept
 * (whole, JSON) request body of that step; undefined when none was kept.
 */
export function recordedState(job: JobDetail, steps: Step[], step: number): { state: unknown } | undefined {
  if (step === 0) return { state: null };
  if (step === lastStep(job)) return { state: job.state ?? null };
  for (let i = steps.length - 1; i >= 0; i--) {
    const req = steps[i].bodies?.request;
    if (steps[i].step !== step || !req || req.truncated || req.format !== 'json') continue;
    const body = req.body as { job?: { state?: unknown } } | null;
    if (body && typeof body === 'object' && body.job) return { state: body.job.state ?? null };
  }
  return undefined;
}

const pretty = (v: unknown) => JSON.stringify(v, null, 2);

/**
 * ReplayForms are a finished run's Replay and Rerun forms (docs/protocol.md, "Replay and
 * rerun"): replay from a chosen step with its recorded state or an edited one, or rerun
 * as a new job with the input edited. Each says what the API answered.
 */
export function ReplayForms({ job, steps, onReplayed, ok, fail }: {
  job: JobDetail;
  steps: Step[];
  onReplayed: () => Promise<void>;
  ok: (text: string) => void;
  fail: (e: unknown) => void;
}) {
  const last = lastStep(job);
  const [open, setOpen] = useState<'replay' | 'rerun' | null>(null);
  const [step, setStep] = useState(last);
  const recorded = recordedState(job, steps, step);
  const [stateText, setStateText] = useState<string | null>(null); // null: the recorded one, untouched
  const [inputText, setInputText] = useState(pretty(job.input));

  const replay = async (e: Event) => {
    e.preventDefault();
    const text = stateText ?? (recorded ? pretty(recorded.state) : '');
    let body: { from_step: number; state?: unknown } = { from_step: step };
    if (stateText !== null || !recorded) {
      try {
        const state = JSON.parse(text);
        if (!recorded || pretty(state) !== pretty(recorded.state)) body = { from_step: step, state };
      } catch {
        fail(new Error('The state is not valid JSON.'));
        return;
      }
    }
    try {
      await must(api.POST('/v1/jobs/{id}/replay', { params: { path: { id: job.id } }, body: body as { from_step: number } }));
      ok(`Run ${job.id} replays from step ${step}${'state' in body ? ' with the edited state' : ''}.`);
      setOpen(null);
      setStateText(null);
      await onReplayed();
    } catch (err) {
      fail(err);
    }
  };
  const rerun = async (e: Event) => {
    e.preventDefault();
    let input: unknown;
    try {
      input = JSON.parse(inputText);
    } catch {
      fail(new Error('The input is not valid JSON.'));
      return;
    }
    try {
      const j = await must(api.POST('/v1/jobs/{id}/rerun', { params: { path: { id: job.id } }, body: { input: input as Record<string, never> } }));
      ok(`Run ${j.id} reruns run ${job.id}.`);
      navigate(`/runs/${j.id}`);
    } catch (err) {
      fail(err);
    }
  };

  return (
    <>
      <button onClick={() => setOpen(open === 'replay' ? null : 'replay')} aria-expanded={open === 'replay'}>
        Replay…
      </button>
      <button onClick={() => setOpen(open === 'rerun' ? null : 'rerun')} aria-expanded={open === 'rerun'}>
        Rerun with edited input…
      </button>
      {open === 'replay' && (
        <form class="card replay-form" onSubmit={replay} aria-label="Replay from a step">
          <h3>Replay run {job.id} from a step</h3>
          <label>
            From step{' '}
            <select
              name="from_step"
              value={String(step)}
              onChange={(e) => {
                setStep(Number((e.target as HTMLSelectElement).value));
                setStateText(null);
              }}
            >
              {Array.from({ length: last + 1 }, (_, i) => (
                <option value={String(i)}>{i}</option>
              ))}
            </select>
          </label>
          <label class="grow">
            State (JSON){' '}
            <span class="muted" data-testid="state-source">
              {recorded
                ? stateText === null
                  ? 'as recorded: the state this step ran with'
                  : 'edited'
                : 'not kept for this step (its queue keeps request bodies with step_bodies "all"): give one'}
            </span>
            <textarea
              name="state"
              rows={6}
              required={!recorded}
              value={stateText ?? (recorded ? pretty(recorded.state) : '')}
              onInput={(e) => setStateText((e.target as HTMLTextAreaElement).value)}
            />
          </label>
          <p class="muted">
            The run becomes runnable at this step with fresh attempts; its history stays and the replay's attempts follow it.
          </p>
          <button type="submit">Replay from step {step}</button>
        </form>
      )}
      {open === 'rerun' && (
        <form class="card replay-form" onSubmit={rerun} aria-label="Rerun with edited input">
          <h3>Rerun run {job.id} as a new run</h3>
          <label class="grow">
            Input (JSON)
            <textarea name="input" rows={6} value={inputText} onInput={(e) => setInputText((e.target as HTMLTextAreaElement).value)} />
          </label>
          <p class="muted">A new run of {job.handler} from its first step, linked to this one; this run stays as it is.</p>
          <button type="submit">Rerun</button>
        </form>
      )}
    </>
  );
}
