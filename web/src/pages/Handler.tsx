import { useState } from 'preact/hooks';
import { api, must, type Handler as HandlerConfig } from '../api';
import { StepCharts } from '../charts';
import { Fact, PollError, ago, usePoll } from '../ui';

/**
 * Handler is one handler's page (#/handlers/charge): its settings, a link to its runs,
 * and its throughput, error rate and latency charts, live. Sections stack in order, so a
 * health or circuit-breaker section can be added between the settings and the charts.
 */
export function Handler({ name }: { name: string }) {
  const [handler, setHandler] = useState<HandlerConfig | null>(null);
  const { error } = usePoll(
    (signal) => must(api.GET('/v1/handlers/{name}', { params: { path: { name } }, signal })),
    setHandler,
    10000,
    [name],
  );
  return (
    <section class="handler">
      <header class="run-head">
        <h2>
          Handler {name}
        </h2>
        <div class="actions">
          <a href={`#/runs?handler=${encodeURIComponent(name)}`}>Runs of {name}</a>
          <a href="#/handlers">All handlers</a>
        </div>
      </header>
      <PollError error={error} stale={handler !== null} />
      {handler && (
        <dl class="facts" data-testid="handler-settings">
          <Fact label="URL" title={handler.url}>
            <span style={{ display: 'block', overflow: 'hidden', textOverflow: 'ellipsis', whiteSpace: 'nowrap' }}>{handler.url}</span>
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
      <StepCharts key={name} handler={name} />
    </section>
  );
}
