// Small shared pieces: time formatting, status badges, JSON views, notices, polling.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import { ApiError, isAbort } from './api';

export function ago(iso?: string | null, now = Date.now()): string {
  if (!iso) return '—';
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  const abs = Math.abs(s);
  const unit = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 86400 ? `${Math.round(abs / 3600)}h` : `${Math.round(abs / 86400)}d`;
  return s >= 0 ? `${unit} ago` : `in ${unit}`;
}

export function ms(n?: number | null): string {
  if (n === undefined || n === null) return '—';
  return n < 1000 ? `${n.toFixed(n < 10 ? 1 : 0)} ms` : `${(n / 1000).toFixed(2)} s`;
}

/** Fact is one labelled value of a dl.facts grid; a wide one takes a whole row (a URL, in full). */
export function Fact({ label, title, wide, children }: { label: string; title?: string; wide?: boolean; children: ComponentChildren }) {
  return (
    <div class={wide ? 'wide' : undefined}>
      <dt>{label}</dt>
      <dd title={title}>{children}</dd>
    </div>
  );
}

export function Status({ status }: { status: string }) {
  return <span class={`badge s-${status}`}>{status}</span>;
}

/** at says a time as the clock shows it: HH:MM:SS today, the date too on another day. */
export function at(iso: string, now = Date.now()): string {
  const d = new Date(iso);
  const today = new Date(now).toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

/**
 * JobBadge is a job's status badge; a runnable job not yet eligible (a delay, a run_at,
 * a retry's backoff) says until when, since it is not waiting for a slot.
 */
export function JobBadge({ job, now = Date.now() }: { job: { status: string; eligible_at?: string | null }; now?: number }) {
  const delayed = job.status === 'runnable' && job.eligible_at && new Date(job.eligible_at).getTime() > now;
  if (!delayed) return <Status status={job.status} />;
  return (
    <span class="badge s-delayed" data-testid="delayed" title={`runnable from ${job.eligible_at} (${ago(job.eligible_at, now)})`}>
      delayed until {at(job.eligible_at!, now)}
    </span>
  );
}

export function Json({ label, value, open }: { label: string; value: unknown; open?: boolean }) {
  const empty = value === null || value === undefined;
  return (
    <details class="json" open={open && !empty}>
      <summary>
        {label} {empty && <span class="muted">null</span>}
      </summary>
      {!empty && <pre>{JSON.stringify(value, null, 2)}</pre>}
    </details>
  );
}

export function Notice({ notice }: { notice: { kind: 'ok' | 'error'; text: string } | null }) {
  return (
    <div class="notice-slot" role="status" aria-live="polite">
      {notice && <p class={`notice ${notice.kind}`}>{notice.text}</p>}
    </div>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <h3>{title}</h3>
      {children}
    </div>
  );
}

/**
 * usePoll fetches now, every intervalMs while the page is visible, whenever deps change, and
 * when refresh() is called (after an action), and hands each fresh result to apply.
 *
 * Only the newest request may apply: every request takes a sequence number, a change of
 * deps or a refresh aborts the one in flight, and a result whose number is no longer the
 * newest is dropped, so an old filter's page or a slow poll that returns after a newer
 * one never overwrites newer data. A tick while a request is in flight is skipped rather
 * than piled up. A failed poll sets error (the page shows it, see PollError) and keeps the
 * last data; the next success clears it.
 */
export function usePoll<T>(
  fetch: (signal: AbortSignal) => Promise<T>,
  apply: (data: T) => void,
  intervalMs: number,
  deps: unknown[],
): { error: Error | null; refresh: () => Promise<void> } {
  const [error, setError] = useState<Error | null>(null);
  const fetchRef = useRef(fetch);
  fetchRef.current = fetch;
  const applyRef = useRef(apply);
  applyRef.current = apply;
  const seq = useRef(0);
  const inFlight = useRef<AbortController | null>(null);
  const run = useRef<() => Promise<void>>(async () => {});

  useEffect(() => {
    let stopped = false;
    run.current = async () => {
      inFlight.current?.abort();
      const ctl = new AbortController();
      inFlight.current = ctl;
      const mine = ++seq.current;
      const newest = () => !stopped && mine === seq.current;
      try {
        const data = await fetchRef.current(ctl.signal);
        if (!newest()) return;
        applyRef.current(data);
        setError(null);
      } catch (e) {
        if (!newest() || isAbort(e)) return;
        setError(e instanceof Error ? e : new Error(String(e)));
      } finally {
        if (inFlight.current === ctl) inFlight.current = null;
      }
    };
    const tick = () => {
      if (!stopped && !inFlight.current && document.visibilityState === 'visible') void run.current();
    };
    void run.current();
    const t = setInterval(tick, intervalMs);
    return () => {
      stopped = true;
      clearInterval(t);
      inFlight.current?.abort();
      inFlight.current = null;
    };
  }, deps);

  return { error, refresh: () => run.current() };
}

/** PollError is the banner a page shows while its refresh fails: the problem's title and detail. */
export function PollError({ error, stale }: { error: Error | null; stale?: boolean }) {
  if (!error) return null;
  const problem = error instanceof ApiError ? error.problem : undefined;
  const title = problem?.title ?? (error instanceof ApiError && error.status === 0 ? 'Server unreachable' : 'Refresh failed');
  return (
    <div class="notice error poll-error" role="alert" data-testid="poll-error">
      <strong>{title}</strong>
      {error.message !== title && ` ${error.message}`}
      {stale && <span class="muted"> The data below is from the last successful refresh.</span>}
    </div>
  );
}

export function useNotice() {
  const [notice, setNotice] = useState<{ kind: 'ok' | 'error'; text: string } | null>(null);
  return {
    notice,
    ok: (text: string) => setNotice({ kind: 'ok', text }),
    fail: (e: unknown) => setNotice({ kind: 'error', text: e instanceof Error ? e.message : String(e) }),
  };
}
