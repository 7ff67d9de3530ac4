import { render } from 'preact';
import { useState } from 'preact/hooks';
import { hasToken, setToken, whenUnauthorized } from './api';
import { useRoute } from './router';
import { Runs } from './pages/Runs';
import { Run } from './pages/Run';
import { Queues } from './pages/Queues';
import { Flow, Handlers } from './pages/Settings';
import { Handler } from './pages/Handler';
import { ScheduleDetail, Schedules } from './pages/Schedules';
import './styles.css';

function TokenPrompt({ onDone }: { onDone: () => void }) {
  return (
    <form
      class="card token"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(String(new FormData(e.target as HTMLFormElement).get('token') || ''));
        onDone();
      }}
    >
      <h2>Sign in</h2>
      <p>This server requires an API token or key (a read-scope key is enough to browse).</p>
      <label class="grow">
        Token <input name="token" type="password" autoFocus required autoComplete="off" />
      </label>
      <button type="submit">Continue</button>
    </form>
  );
}

function App() {
  const route = useRoute();
  const [needToken, setNeedToken] = useState(false);
  const [epoch, setEpoch] = useState(0);
  whenUnauthorized(() => setNeedToken(true));
  const nav = [
    ['/runs', 'Runs'],
    ['/queues', 'Queues'],
    ['/handlers', 'Handlers'],
    ['/schedules', 'Schedules'],
    ['/flow', 'Gates & rate limits'],
  ];
  const runMatch = route.path.match(/^\/runs\/(\d+)$/);
  const named = route.path.match(/^\/(handlers|schedules)\/(.+)$/);
  let page;
  if (runMatch) page = <Run key={runMatch[1]} id={Number(runMatch[1])} />;
  else if (named?.[1] === 'handlers') page = <Handler key={named[2]} name={decodeURIComponent(named[2])} />;
  else if (named?.[1] === 'schedules') page = <ScheduleDetail key={named[2]} name={decodeURIComponent(named[2])} />;
  else if (route.path === '/schedules') page = <Schedules />;
  else if (route.path === '/queues') page = <Queues selected={route.query.queue} fkey={route.query.fkey} forder={route.query.forder} />;
  else if (route.path === '/handlers') page = <Handlers />;
  else if (route.path === '/flow') page = <Flow />;
  else page = <Runs q={route.query} />;
  return (
    <>
      <header class="top">
        <a class="brand" href="#/runs">
          gendurable
        </a>
        <nav aria-label="Sections">
          {nav.map(([href, label]) => (
            <a href={`#${href}`} aria-current={route.path.startsWith(href) ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        {/* Only a token the browser holds can be forgotten: with auth off none is ever asked for. */}
        {hasToken() && (
          <button
            class="link signout"
            onClick={() => {
              setToken('');
              setEpoch(epoch + 1);
            }}
          >
            Forget token
          </button>
        )}
      </header>
      <main key={epoch}>
        {needToken ? (
          <TokenPrompt
            onDone={() => {
              setNeedToken(false);
              setEpoch(epoch + 1);
            }}
          />
        ) : (
          page
        )}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
