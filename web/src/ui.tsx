// Small shared pieces: time formatting, status badges, JSON views, notices, polling.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';

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

export function Status({ status }: { status: string }) {
  return <span class={`badge s-${status}`}>{status}</span>;
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

/** usePoll calls load now and every intervalMs while the page is visible. */
export function usePoll(load: () => Promise<void>, intervalMs: number, deps: unknown[]) {
  const saved = useRef(load);
  saved.current = load;
  useEffect(() => {
    let stopped = false;
    const tick = () => {
      if (!stopped && document.visibilityState === 'visible') saved.current().catch(() => {});
    };
    tick();
    const t = setInterval(tick, intervalMs);
    return () => {
      stopped = true;
      clearInterval(t);
    };
  }, deps);
}

export function useNotice() {
  const [notice, setNotice] = useState<{ kind: 'ok' | 'error'; text: string } | null>(null);
  return {
    notice,
    ok: (text: string) => setNotice({ kind: 'ok', text }),
    fail: (e: unknown) => setNotice({ kind: 'error', text: e instanceof Error ? e.message : String(e) }),
  };
}
