import { useState } from 'preact/hooks';
import { api, must, type Job } from '../api';
import { PollError, Status, ago, usePoll } from '../ui';

/** ANCESTORS_MAX bounds the walk up the parent links (one request per level). */
const ANCESTORS_MAX = 20;
/** CHILD_LISTS_MAX bounds the children listings one refresh makes (one request each). */
const CHILD_LISTS_MAX = 30;
/** CHILDREN_PER_RUN is the page of children read per run (the newest). */
const CHILDREN_PER_RUN = 50;

interface Node {
  job: Job;
  children: Node[];
  /** loaded: its children were listed; more: it has more children than were listed. */
  loaded: boolean;
  more: boolean;
}

interface Tree {
  root: Node;
  runs: number;
  /** partial: some runs' children were not listed (the request budget ran out). */
  partial: boolean;
}

const node = (job: Job): Node => ({ job, children: [], loaded: false, more: false });

/**
 * loadFamily reads a run's family: the chain of parents up to the root, then the root's
 * descendants breadth first, the chain's runs first so that the path to this run is always
 * there, within CHILD_LISTS_MAX children listings.
 */
async function loadFamily(job: Job, signal: AbortSignal): Promise<Tree> {
  const chain: Job[] = [job];
  while (chain[0].parent_id && chain.length <= ANCESTORS_MAX) {
    chain.unshift(await must(api.GET('/v1/jobs/{id}', { params: { path: { id: chain[0].parent_id } }, signal })));
  }
  const root = node(chain[0]);
  const onPath = new Map(chain.map((j, i) => [j.id, chain[i + 1]]));
  let runs = 1;
  let partial = false;
  let level = [root];
  let budget = CHILD_LISTS_MAX;
  while (level.length) {
    // The chain's runs and this run first, then the others, while the budget lasts.
    const ordered = [...level.filter((n) => onPath.has(n.job.id)), ...level.filter((n) => !onPath.has(n.job.id))];
    const listed = ordered.slice(0, budget);
    if (listed.length < ordered.length) partial = true;
    budget -= listed.length;
    const pages = await Promise.all(listed.map((n) =>
      must(api.GET('/v1/jobs/{id}/children', { params: { path: { id: n.job.id }, query: { limit: CHILDREN_PER_RUN } }, signal }))));
    const next: Node[] = [];
    listed.forEach((n, i) => {
      const kids = pages[i].jobs;
      // The next run on the chain belongs here even when it is older than the page listed.
      const down = onPath.get(n.job.id);
      if (down && !kids.some((k) => k.id === down.id)) kids.push(down);
      n.loaded = true;
      n.more = pages[i].next_cursor !== null && pages[i].next_cursor !== undefined;
      n.children = kids.sort((a, b) => a.id - b.id).map(node);
      runs += n.children.length;
      next.push(...n.children);
    });
    level = next;
  }
  return { root, runs, partial };
}

function Branch({ n, current }: { n: Node; current: number }) {
  const j = n.job;
  const here = j.id === current;
  return (
    <li data-job={j.id} aria-current={here ? 'true' : undefined}>
      <span class={here ? 'node here' : 'node'}>
        {here ? <strong>run {j.id}</strong> : <a href={`#/runs/${j.id}`}>run {j.id}</a>} <span class="muted">{j.handler}</span>{' '}
        <Status status={j.status} />
        {j.key && <span class="muted"> key {j.key}</span>}
        {j.pending_children > 0 && (
          <span class="muted"> · {j.pending_children} {j.pending_children === 1 ? 'child' : 'children'} not finished</span>
        )}
        <span class="muted" title={j.updated_at}> · {ago(j.finished_at ?? j.updated_at)}</span>
      </span>
      {n.children.length > 0 && (
        <ul>
          {n.children.map((c) => (
            <Branch key={c.job.id} n={c} current={current} />
          ))}
          {n.more && (
            <li class="muted">
              <a href={`#/runs/${j.id}`}>older children of run {j.id}</a> not shown
            </li>
          )}
        </ul>
      )}
      {!n.loaded && j.pending_children > 0 && (
        <ul>
          <li class="muted">
            <a href={`#/runs/${j.id}`}>open run {j.id}</a> to see its children
          </li>
        </ul>
      )}
    </li>
  );
}

/** Family shows a run among its parent, siblings, children and their children, with links. */
export function Family({ job }: { job: Job }) {
  const [tree, setTree] = useState<Tree | null>(null);
  // Refreshed while the page is open; the key is the job's updated_at so that a change of
  // this run (a child finished, a spawn) refreshes the tree at once.
  const { error } = usePoll((signal) => loadFamily(job, signal), setTree, 5000, [job.id, job.updated_at]);
  return (
    <section class="family" aria-label="Family">
      <h3>
        Family{' '}
        {tree && (
          <span class="muted">
            {tree.runs} run{tree.runs === 1 ? '' : 's'} under run {tree.root.job.id}
            {tree.partial && ' (the deepest are not listed: open a run to see its own)'}
          </span>
        )}
      </h3>
      <PollError error={error} stale={tree !== null} />
      {tree && (
        <ul class="tree" data-testid="family">
          <Branch n={tree.root} current={job.id} />
        </ul>
      )}
    </section>
  );
}
