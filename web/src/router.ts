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

export function navigate(path: string, query: Record<string, string | undefined> = {}, keepEmpty: string[] = []) {
  const q = new URLSearchParams();
  // An empty value is no filter, and is left out; except for the names in keepEmpty,
  // where "" is a value (the default fairness key).
  for (const [k, v] of Object.entries(query)) if (v || (v === '' && keepEmpty.includes(k))) q.set(k, v);
  const s = q.toString();
  location.hash = s ? `${path}?${s}` : path;
}
