import { useState } from 'preact/hooks';
import { api, must, type FairnessKey } from '../api';
import { Notice, PollError, ago, useNotice, usePoll } from '../ui';
import { navigate } from '../router';

/** TOP is how many of the busiest keys the default view shows. */
const TOP = 20;
/** PAGE is how many keys a page in key order shows. */
const PAGE = 25;

/** KeyOrder is how the key table is sorted: the busiest first (one page), or by key (paged). */
export type KeyOrder = 'runnable' | 'key';

/** keyName shows a key; "" is the key of a fair queue's jobs that name none. */
function keyName(key: string) {
  return key === '' ? <span class="muted" title='Jobs that name no fairness key share the key ""'>(no key)</span> : key;
}

/**
 * FairnessKeys shows a fair queue's keys with their runnable and in-flight counts, weights
 * and caps: the busiest first, or all of them by key a page at a time, narrowed by a key
 * prefix; and sets or drops a key's weight and cap. The prefix and the order are in the URL
 * (#/queues?queue=q&fkey=acme&forder=key), so a run's fairness key links here.
 */
export function FairnessKeys({ queue, prefix, order }: { queue: string; prefix: string; order: KeyOrder }) {
  const [keys, setKeys] = useState<FairnessKey[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  // pages holds the `after` of each page shown so far in key order ('' for the first), so
  // Previous can go back without the API paging backwards.
  const [pages, setPages] = useState<string[]>(['']);
  const after = pages[pages.length - 1];
  // edit fills the form from a row's Edit; n remounts the form so that it takes the values.
  const [edit, setEdit] = useState({ key: '', weight: '', cap: '', n: 0 });
  const fill = (key: string, weight: string, cap: string) => setEdit({ key, weight, cap, n: edit.n + 1 });
  const { notice, ok, fail } = useNotice();

  const { error, refresh } = usePoll(
    (signal) =>
      must(
        api.GET('/v1/queues/{name}/fairness-keys', {
          signal,
          params: {
            path: { name: queue },
            query: {
              order,
              prefix: prefix || undefined,
              after: order === 'key' && after ? after : undefined,
              limit: order === 'key' ? PAGE : TOP,
            },
          },
        }),
      ),
    (r) => {
      setKeys(r.keys);
      setNext(r.next_after ?? null);
    },
    3000,
    [queue, prefix, order, after],
  );

  const go = (q: { prefix?: string; order?: KeyOrder }) => {
    setPages(['']);
    const o = q.order ?? order;
    navigate('/queues', { queue, fkey: q.prefix ?? prefix, forder: o === 'runnable' ? undefined : o });
  };

  const save = async (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const key = String(f.get('key') || '').trim();
    const weight = String(f.get('weight') || '').trim();
    const cap = String(f.get('max_in_flight') || '').trim();
    try {
      const k = await must(
        api.PUT('/v1/queues/{name}/fairness-keys/{key}', {
          params: { path: { name: queue, key } },
          body: { weight: weight ? Number(weight) : undefined, max_in_flight: cap ? Number(cap) : null },
        }),
      );
      ok(`Key ${k.key} of ${queue}: weight ${k.weight}, ${k.max_in_flight == null ? 'no cap' : `at most ${k.max_in_flight} in flight`}.`);
      fill('', '', '');
      await refresh();
    } catch (err) {
      fail(err);
    }
  };

  const drop = async (key: string) => {
    try {
      await must(api.DELETE('/v1/queues/{name}/fairness-keys/{key}', { params: { path: { name: queue, key } } }));
      ok(`Key ${key} of ${queue} is back to weight 1 and no cap.`);
      await refresh();
    } catch (err) {
      fail(err);
    }
  };

  let empty = '';
  if (keys && keys.length === 0) {
    if (prefix) empty = `No key starting with “${prefix}” has ${order === 'runnable' ? 'runnable work' : 'work or settings'} in ${queue}.`;
    else if (order === 'runnable') empty = `No key has runnable work in ${queue} now. List the keys by name to see those with settings or steps in flight.`;
    else if (after) empty = 'No more keys.';
    else empty = `No fairness keys in ${queue} yet: a key appears with its first job here, or once you set its weight or cap below.`;
  }

  return (
    <section class="fairness" aria-label={`Fairness keys of ${queue}`}>
      <h3>Fairness keys of {queue}</h3>
      <p class="muted">
        The keys with runnable work take turns in each claim, each by its weight (default 1); a key's cap holds the
        steps it has executing at once across every server (default: none).
      </p>
      <form
        class="filters"
        aria-label="Find fairness keys"
        onSubmit={(e) => {
          e.preventDefault();
          go({ prefix: String(new FormData(e.target as HTMLFormElement).get('prefix') || '').trim() });
        }}
      >
        <label class="grow">
          Key starts with <input name="prefix" data-testid="fkey-prefix" defaultValue={prefix} key={prefix} placeholder="tenant-" autoComplete="off" />
        </label>
        <label>
          Show
          <select
            data-testid="fkey-order"
            value={order}
            onChange={(e) => go({ order: (e.target as HTMLSelectElement).value as KeyOrder })}
          >
            <option value="runnable">busiest first</option>
            <option value="key">all, by key</option>
          </select>
        </label>
        <button type="submit">Search</button>
        {prefix && (
          <button type="button" class="link" onClick={() => go({ prefix: '' })}>
            Clear
          </button>
        )}
      </form>
      <PollError error={error} stale={keys !== null} />
      <Notice notice={notice} />
      {empty ? (
        <p class="empty muted" data-testid="fkeys-empty">
          {empty}
        </p>
      ) : (
        keys && (
          <div class="table-wrap">
            <table data-testid="fairness-keys">
              <caption class="muted">
                {order === 'runnable'
                  ? `The ${keys.length === TOP ? `${TOP} keys` : keys.length === 1 ? 'key' : `${keys.length} keys`} with the most runnable jobs${prefix ? ` among those starting with “${prefix}”` : ''}`
                  : `Keys with work or settings${prefix ? ` starting with “${prefix}”` : ''}, page ${pages.length}`}
              </caption>
              <thead>
                <tr>
                  <th>Key</th>
                  <th class="num">Runnable</th>
                  <th class="num">In flight</th>
                  <th class="num">Weight</th>
                  <th class="num">Cap</th>
                  <th>Settings</th>
                  <th></th>
                </tr>
              </thead>
              <tbody>
                {keys.map((k) => (
                  <tr key={k.key} data-fkey={k.key}>
                    <td class="ellipsis">
                      <a href={`#/runs?${new URLSearchParams({ queue, fairness_key: k.key })}`} title={`The runs of ${k.key === '' ? 'the jobs without a key' : k.key} in ${queue}`}>
                        {keyName(k.key)}
                      </a>
                    </td>
                    <td class="num" data-testid="fkey-runnable">{k.runnable}</td>
                    <td class="num" data-testid="fkey-in-flight">
                      {k.in_flight}
                    </td>
                    <td class="num" data-testid="fkey-weight">{k.weight}</td>
                    <td class="num" data-testid="fkey-cap">
                      {k.max_in_flight ?? <span class="muted">none</span>}
                    </td>
                    <td title={k.updated_at ?? ''}>{k.declared ? `set ${ago(k.updated_at)}` : <span class="muted">defaults</span>}</td>
                    <td>
                      {k.key !== '' && (
                        <button
                          type="button"
                          class="small"
                          onClick={() => fill(k.key, String(k.weight), k.max_in_flight == null ? '' : String(k.max_in_flight))}
                        >
                          Edit
                        </button>
                      )}{' '}
                      {k.declared && (
                        <button type="button" class="small danger" onClick={() => drop(k.key)}>
                          Reset
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )
      )}
      {order === 'key' && (pages.length > 1 || next) && (
        <div class="pager">
          <button type="button" disabled={pages.length === 1} onClick={() => setPages(pages.slice(0, -1))}>
            Previous
          </button>
          <button type="button" disabled={!next} onClick={() => next && setPages([...pages, next])}>
            Next
          </button>
        </div>
      )}
      <form class="card" aria-label="Set a fairness key" onSubmit={save} key={edit.n}>
        <h3>Set a key's weight and cap</h3>
        <label class="grow">
          Key <input name="key" required maxLength={512} defaultValue={edit.key} />
        </label>
        <label>
          Weight
          <input name="weight" type="number" min={1} max={1000} placeholder="1" size={5} defaultValue={edit.weight} />
        </label>
        <label>
          Cap in flight
          <input name="max_in_flight" type="number" min={1} max={1000000} placeholder="none" size={7} defaultValue={edit.cap} />
        </label>
        <button type="submit">Save key</button>
      </form>
    </section>
  );
}
