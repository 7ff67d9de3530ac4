// Hash routing: #/runs?status=failed, #/runs/42, #/queues, #/handlers, #/handlers/charge, #/schedules, #/schedules/nightly, #/flow.
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  path: string;
  query: Record<string, string>;
}

function parse(): Route {
  const h = location.hash.replace(/^#/, '') || '/runs';
  const [path, qs] = h.split('?');
  return { path, query: Object.fromEntries(new URLSearchParams(qs ?? '')) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const on = () => setRoute(parse());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

export function navigate(path: string, query: Record<string, string | undefined> = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) q.set(k, v);
  const s = q.toString();
  location.hash = s ? `${path}?${s}` : path;
}
