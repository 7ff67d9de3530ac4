import { useState } from 'preact/hooks';
import { ApiError, api, must, type Handler as HandlerConfig } from '../api';
import { StepCharts } from '../charts';
import { Empty, Fact, Notice, PollError, ago, useNotice, usePoll } from '../ui';
import { Health } from './Settings';

/**
 * Handler is one handler's page (#/handlers/charge): its settings and circuit breaker
 * (with Resume when it is open or paused), a link to its runs, and its throughput, error
 * rate and latency charts, live. A name no handler has shows that, and no charts.
 */
export function Handler({ name }: { name: string }) {
  const [handler, setHandler] = useState<HandlerConfig | null>(null);
  const [missing, setMissing] = useState(false);
  const { notice, ok, fail } = useNotice();
  const { error, refresh } = usePoll(
    async (signal) => {
      try {
        return await must(api.GET('/v1/handlers/{name}', { params: { path: { name } }, signal }));
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) return null;
        throw e;
      }
    },
    (h) => {
      setHandler(h);
      setMissing(h === null);
    },
    3000, // the breaker's state follows the calls
    [name],
  );
  const resume = async () => {
    try {
      await must(api.POST('/v1/handlers/{name}/resume', { params: { path: { name } } }));
      ok(`Handler ${name} resumed: its steps are called again.`);
      await refresh();
    } catch (err) {
      fail(err);
    }
  };
  if (missing) {
    return (
      <section class="handler">
        <Empty title={`No handler named ${name}`}>
          <p>
            It may have been deleted, or the address is mistyped. <a href="#/handlers">All handlers</a> ·{' '}
            <a href={`#/runs?handler=${encodeURIComponent(name)}`}>runs naming {name}</a>
          </p>
        </Empty>
      </section>
    );
  }
  const b = handler?.breaker;
  return (
    <section class="handler">
      <header class="run-head">
        <h2>Handler {name}</h2>
        <div class="actions">
          <a href={`#/runs?handler=${encodeURIComponent(name)}`}>Runs of {name}</a>
          <a href="#/handlers">All handlers</a>
        </div>
      </header>
      <PollError error={error} stale={handler !== null} />
      <Notice notice={notice} />
      {handler && b && (
        <dl class="facts" data-testid="handler-settings">
          <Fact label="URL" wide>
            <span class="break" data-testid="handler-url">{handler.url}</span>
          </Fact>
          <Fact label="Circuit breaker">
            <span data-testid="handler-breaker">
              <Health h={handler} onResume={resume} />
            </span>
          </Fact>
          {b.state !== 'closed' && b.opened_at && (
            <Fact label="Opened" title={b.opened_at}>
              {ago(b.opened_at)}
            </Fact>
          )}
          {b.paused && (
            <Fact label="Paused" title={b.paused_at ?? ''}>
              {ago(b.paused_at)}
              {b.paused_reason ? ` (${b.paused_reason})` : ''}
            </Fact>
          )}
          <Fact label="Breaker settings" title="opens after threshold consecutive failures; pauses after pause_after open">
            {b.threshold === 0 ? 'off' : `opens at ${b.threshold} failures, probes every ${b.probe_interval}…${b.probe_interval_max}, pauses after ${b.pause_after}`}
          </Fact>
          <Fact label="Timeout">{handler.timeout}</Fact>
          <Fact label="Max attempts">{handler.max_attempts}</Fact>
          <Fact label="Backoff">
            {handler.backoff_base} … {handler.backoff_max}
          </Fact>
          <Fact label="Updated" title={handler.updated_at}>
            {ago(handler.updated_at)}
          </Fact>
        </dl>
      )}
      {handler && <StepCharts key={name} handler={name} />}
    </section>
  );
}
