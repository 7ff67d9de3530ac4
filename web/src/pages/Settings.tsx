import { useState } from 'preact/hooks';
import { api, must, type Gate, type Handler, type RateLimit } from '../api';
import { Empty, Notice, PollError, ago, useNotice, usePoll } from '../ui';

function form(e: Event): FormData {
  e.preventDefault();
  return new FormData(e.target as HTMLFormElement);
}

function opt(f: FormData, name: string): string | undefined {
  const v = String(f.get(name) || '').trim();
  return v || undefined;
}

/** Health is a handler's circuit breaker: healthy, failing, open (with its next probe) or paused. */
export function Health({ h, onResume }: { h: Handler; onResume: (name: string) => void }) {
  const b = h.breaker;
  const resume = (
    <button type="button" class="small" onClick={() => onResume(h.name)}>
      Resume
    </button>
  );
  if (b.paused)
    return (
      <span data-health="paused" title={b.paused_reason || ''}>
        <span class="badge s-failed">paused</span> {resume}
      </span>
    );
  if (b.state === 'closed') {
    if (b.threshold === 0) return <span data-health="off" class="muted">breaker off</span>;
    if (b.consecutive_failures === 0) return <span data-health="healthy" class="badge s-done">healthy</span>;
    return (
      <span data-health="failing" class="badge s-executing" title={`opens at ${b.threshold}`}>
        {b.consecutive_failures} failures
      </span>
    );
  }
  return (
    <span data-health={b.state} title={`opened ${ago(b.opened_at)}; ${b.opens} opens in all`}>
      <span class="badge s-failed">{b.state === 'open' ? 'open' : 'probing'}</span>{' '}
      <span class="muted">{b.state !== 'open' ? 'probe running' : b.next_probe_at && new Date(b.next_probe_at).getTime() > Date.now() ? `probe ${ago(b.next_probe_at)}` : 'probe due'}</span> {resume}
    </span>
  );
}

/** Handlers lists the registered webhooks and registers or changes one. */
export function Handlers() {
  const [handlers, setHandlers] = useState<Handler[] | null>(null);
  const { notice, ok, fail } = useNotice();
  const { error, refresh } = usePoll(
    (signal) => must(api.GET('/v1/handlers', { signal })),
    (r) => setHandlers(r.handlers),
    3000, // the health column follows the breakers
    [],
  );
  const save = async (e: Event) => {
    const f = form(e);
    const name = String(f.get('name'));
    const attempts = opt(f, 'max_attempts');
    try {
      await must(api.PUT('/v1/handlers/{name}', { params: { path: { name } }, body: {
        url: String(f.get('url')),
        secret: opt(f, 'secret'),
        timeout: opt(f, 'timeout'),
        max_attempts: attempts ? Number(attempts) : undefined,
      } }));
      ok(`Handler ${name} saved.`);
      (e.target as HTMLFormElement).reset();
      await refresh();
    } catch (err) {
      fail(err);
    }
  };
  const resume = async (name: string) => {
    try {
      await must(api.POST('/v1/handlers/{name}/resume', { params: { path: { name } } }));
      ok(`Handler ${name} resumed: its steps are called again.`);
      await refresh();
    } catch (err) {
      fail(err);
    }
  };
  return (
    <section>
      <PollError error={error} stale />
      <Notice notice={notice} />
      {handlers && handlers.length === 0 && <Empty title="No handlers yet">Register the webhook your steps are sent to.</Empty>}
      {handlers && handlers.length > 0 && (
        <div class="table-wrap">
          <table data-testid="handlers">
            <thead>
              <tr>
                <th>Name</th>
                <th>Health</th>
                <th>URL</th>
                <th>Timeout</th>
                <th class="num">Max attempts</th>
                <th>Backoff</th>
              </tr>
            </thead>
            <tbody>
              {handlers.map((h) => (
                <tr key={h.name}>
                  <td>
                    <a href={`#/handlers/${encodeURIComponent(h.name)}`}>{h.name}</a>{' '}
                    <a class="muted" href={`#/runs?handler=${encodeURIComponent(h.name)}`}>runs</a>
                  </td>
                  <td>
                    <Health h={h} onResume={resume} />
                  </td>
                  <td class="ellipsis">{h.url}</td>
                  <td>{h.timeout}</td>
                  <td class="num">{h.max_attempts}</td>
                  <td>
                    {h.backoff_base} … {h.backoff_max}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <form class="card" onSubmit={save} aria-label="Register a handler">
        <h3>Register or change a handler</h3>
        <label>
          Name <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}" />
        </label>
        <label class="grow">
          URL <input name="url" required type="url" placeholder="https://example.com/steps" />
        </label>
        <label>
          Secret <input name="secret" placeholder="generated" />
        </label>
        <label>
          Timeout <input name="timeout" placeholder="30s" size={6} />
        </label>
        <label>
          Max attempts <input name="max_attempts" type="number" min={1} max={1000} size={4} />
        </label>
        <button type="submit">Save handler</button>
      </form>
    </section>
  );
}

/** Flow lists gates and rate limits and edits them. */
export function Flow() {
  const [gates, setGates] = useState<Gate[]>([]);
  const [limits, setLimits] = useState<RateLimit[]>([]);
  const { notice, ok, fail } = useNotice();
  const { error, refresh } = usePoll(
    (signal) => Promise.all([must(api.GET('/v1/gates', { signal })), must(api.GET('/v1/rate-limits', { signal }))]),
    ([g, r]) => {
      setGates(g.gates);
      setLimits(r.rate_limits);
    },
    5000,
    [],
  );
  const run = async (fn: () => Promise<unknown>, done: string) => {
    try {
      await fn();
      ok(done);
      await refresh();
    } catch (e) {
      fail(e);
    }
  };
  return (
    <section>
      <PollError error={error} stale />
      <Notice notice={notice} />
      <h3>Gates</h3>
      <p class="muted">At most <em>limit</em> jobs of a concurrency key run at once (without a gate: one).</p>
      {gates.length === 0 ? (
        <p class="muted" data-testid="gates-empty">No gates yet: a concurrency key runs one job at a time until a gate below lets it run more.</p>
      ) : (
      <div class="table-wrap">
        <table data-testid="gates">
          <thead>
            <tr>
              <th>Key</th>
              <th class="num">Limit</th>
              <th class="num">Free slots</th>
              <th class="num">Shards</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {gates.map((g) => (
              <tr key={g.key}>
                <td>{g.key}</td>
                <td class="num">{g.limit}</td>
                <td class="num">{g.available}</td>
                <td class="num">{g.shards}</td>
                <td>
                  <button class="danger" onClick={() => run(() => must(api.DELETE('/v1/gates/{key}', { params: { path: { key: g.key } } })), `Gate ${g.key} deleted.`)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      )}
      <form
        class="card"
        aria-label="Set a gate"
        onSubmit={(e) => {
          const f = form(e);
          const key = String(f.get('key'));
          run(() => must(api.PUT('/v1/gates/{key}', { params: { path: { key } }, body: { limit: Number(f.get('limit')), shards: Number(f.get('shards') || 1) } })), `Gate ${key} saved.`);
        }}
      >
        <label>
          Key <input name="key" required />
        </label>
        <label>
          Limit <input name="limit" type="number" min={1} required size={5} />
        </label>
        <label>
          Shards <input name="shards" type="number" min={1} max={64} placeholder="1" size={3} />
        </label>
        <button type="submit">Save gate</button>
      </form>

      <h3>Rate limits</h3>
      <p class="muted">A token bucket per key: <em>rate</em> tokens per second, at most <em>burst</em> stored.</p>
      {limits.length === 0 ? (
        <p class="muted" data-testid="rate-limits-empty">No rate limits yet: a job may name one only once it is set below (an insert naming an unknown one is refused).</p>
      ) : (
      <div class="table-wrap">
        <table data-testid="rate-limits">
          <thead>
            <tr>
              <th>Name</th>
              <th class="num">Rate /s</th>
              <th class="num">Burst</th>
              <th class="num">Keys</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {limits.map((l) => (
              <tr key={l.name}>
                <td>{l.name}</td>
                <td class="num">{l.rate}</td>
                <td class="num">{l.burst}</td>
                <td class="num">{l.buckets}</td>
                <td>
                  <button class="danger" onClick={() => run(() => must(api.DELETE('/v1/rate-limits/{name}', { params: { path: { name: l.name } } })), `Rate limit ${l.name} deleted.`)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      )}
      <form
        class="card"
        aria-label="Set a rate limit"
        onSubmit={(e) => {
          const f = form(e);
          const name = String(f.get('name'));
          run(() => must(api.PUT('/v1/rate-limits/{name}', { params: { path: { name } }, body: { rate: Number(f.get('rate')), burst: Number(f.get('burst')) } })), `Rate limit ${name} saved.`);
        }}
      >
        <label>
          Name <input name="name" required />
        </label>
        <label>
          Rate /s <input name="rate" type="number" min={0} step="any" required size={6} />
        </label>
        <label>
          Burst <input name="burst" type="number" min={1} step="any" required size={6} />
        </label>
        <button type="submit">Save rate limit</button>
      </form>
    </section>
  );
}
