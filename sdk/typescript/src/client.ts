import type { components, operations } from "./api-types.js";
import { ProblemError } from "./problem.js";

type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type JobDetail = Schemas["JobDetail"];
export type JobInsert = Schemas["JobInsert"];
export type JobInserted = Schemas["JobInserted"];
export type JobPage = Schemas["JobPage"];
export type JobStatus = Schemas["JobStatus"];
export type StepRecord = Schemas["Step"];
export type Signal = Schemas["Signal"];
export type SignalSent = Schemas["SignalSent"];
export type HandlerPut = Schemas["HandlerPut"];
export type HandlerConfig = Schemas["HandlerConfig"];
export type SecretRotation = Schemas["SecretRotation"];
export type QueuePut = Schemas["QueuePut"];
export type Queue = Schemas["Queue"];
export type StepAnswer = Schemas["StepAnswer"];
export type LeaseExtended = Schemas["LeaseExtended"];
export type OutcomeApplied = Schemas["OutcomeApplied"];
export type ListJobsQuery = NonNullable<operations["listJobs"]["parameters"]["query"]>;
export type ListChildrenQuery = NonNullable<operations["listJobChildren"]["parameters"]["query"]>;

/** ClientOptions configure a Client. */
export interface ClientOptions {
  /** The server's base URL, e.g. `http://localhost:8080` (no `/v1`). */
  baseUrl: string;
  /** A bearer token or API key, when the server runs with GENDURABLE_API_TOKEN. */
  token?: string;
  /** The fetch to use (default: the platform's). */
  fetch?: typeof fetch;
}

const TERMINAL: readonly JobStatus[] = ["done", "failed", "cancelled"];

/**
 * Client calls gendurable's REST API. Every method answers the decoded body and throws
 * ProblemError for a 4xx or 5xx. It holds no state beyond its options; one per process.
 */
export class Client {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /**
   * request sends one call and decodes its JSON answer (undefined for 204); it throws
   * ProblemError when the status is not 2xx. The typed methods below all use it.
   */
  async request<T>(method: string, path: string, body?: unknown, query?: object): Promise<T> {
    let url = this.baseUrl + path;
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) params.set(k, String(v));
    }
    const queryString = params.toString();
    if (queryString) url += "?" + queryString;
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.#token) headers["authorization"] = `Bearer ${this.#token}`;
    const response = await this.#fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) throw await ProblemError.fromResponse(response);
    if (response.status === 204) return undefined as T;
    return (await response.json()) as T;
  }

  // Jobs.

  /** insertJob inserts one job (a live job holding the same key is answered instead, `deduplicated: true`). */
  insertJob(job: JobInsert): Promise<JobInserted> {
    return this.request("POST", "/v1/jobs", job);
  }

  /** insertJobs inserts up to 10 000 jobs in one statement, answered in request order. */
  async insertJobs(jobs: JobInsert[]): Promise<JobInserted[]> {
    return (await this.request<Schemas["JobBatchResult"]>("POST", "/v1/jobs/batch", { jobs })).jobs;
  }

  /** getJob answers one job with its inbox and children counts. */
  getJob(id: number): Promise<JobDetail> {
    return this.request("GET", `/v1/jobs/${id}`);
  }

  /** listJobs answers one page of jobs, newest first; pass `next_cursor` as `cursor` for the next. */
  listJobs(query: ListJobsQuery = {}): Promise<JobPage> {
    return this.request("GET", "/v1/jobs", undefined, query);
  }

  /** listSteps answers the job's attempt history, oldest first. */
  async listSteps(id: number, query: { limit?: number } = {}): Promise<StepRecord[]> {
    return (await this.request<Schemas["StepPage"]>("GET", `/v1/jobs/${id}/steps`, undefined, query)).steps;
  }

  /** listSignals answers the job's inbox, oldest first (consumed ones flagged). */
  async listSignals(id: number, query: { limit?: number } = {}): Promise<Signal[]> {
    return (await this.request<Schemas["SignalPage"]>("GET", `/v1/jobs/${id}/signals`, undefined, query)).signals;
  }

  /** listChildren answers one page of the job's children, newest first. */
  listChildren(id: number, query: ListChildrenQuery = {}): Promise<JobPage> {
    return this.request("GET", `/v1/jobs/${id}/children`, undefined, query);
  }

  /** cancelJob cancels a live job and its live children (an executing one at its outcome). */
  cancelJob(id: number): Promise<Job> {
    return this.request("POST", `/v1/jobs/${id}/cancel`);
  }

  /** retryJob runs a failed or cancelled job again from where it ended, with fresh attempts. */
  retryJob(id: number): Promise<Job> {
    return this.request("POST", `/v1/jobs/${id}/retry`);
  }

  /**
   * waitForJob polls a job until `until` holds for it (by default: its status is one of
   * `statuses`, itself by default a terminal one) and answers it; it throws when
   * `timeoutMs` (default 30 000) passes first.
   */
  async waitForJob(
    id: number,
    options: { statuses?: readonly JobStatus[]; until?: (job: JobDetail) => boolean; timeoutMs?: number; intervalMs?: number } = {},
  ): Promise<JobDetail> {
    const statuses = options.statuses ?? TERMINAL;
    const until = options.until ?? ((job: JobDetail) => statuses.includes(job.status));
    const timeoutMs = options.timeoutMs ?? 30_000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const job = await this.getJob(id);
      if (until(job)) return job;
      if (Date.now() > deadline) throw new Error(`job ${id} (${job.status}) did not get there within ${timeoutMs}ms`);
      await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
    }
  }

  // Signals.

  /** sendSignal delivers a signal to a job; `woke` says whether it made an awaiting job runnable. */
  sendSignal(id: number, name: string, payload?: unknown): Promise<SignalSent> {
    return this.request("POST", `/v1/jobs/${id}/signals`, { name, payload });
  }

  /** sendSignalByKey delivers a signal to the live job holding `key`. */
  sendSignalByKey(key: string, name: string, payload?: unknown): Promise<SignalSent> {
    return this.request("POST", "/v1/signals", { key, name, payload });
  }

  // Asynchronous steps (a step webhook that answered 202).

  /** heartbeat extends the lease of an asynchronous step; ProblemError 409 when the lease is lost. */
  heartbeat(id: number, token: string): Promise<LeaseExtended> {
    return this.request("POST", `/v1/jobs/${id}/heartbeat`, { token });
  }

  /** completeStep reports the answer of an asynchronous step, fenced by its lease token. */
  completeStep(id: number, token: string, answer: StepAnswer): Promise<OutcomeApplied> {
    return this.request("POST", `/v1/jobs/${id}/outcome`, { token, ...answer });
  }

  // Handlers.

  /** putHandler registers or changes a webhook handler (a new one without `secret` gets a generated one). */
  putHandler(name: string, handler: HandlerPut): Promise<HandlerConfig> {
    return this.request("PUT", `/v1/handlers/${encodeURIComponent(name)}`, handler);
  }

  getHandler(name: string): Promise<HandlerConfig> {
    return this.request("GET", `/v1/handlers/${encodeURIComponent(name)}`);
  }

  async listHandlers(): Promise<HandlerConfig[]> {
    return (await this.request<Schemas["HandlerList"]>("GET", "/v1/handlers")).handlers;
  }

  deleteHandler(name: string): Promise<void> {
    return this.request("DELETE", `/v1/handlers/${encodeURIComponent(name)}`);
  }

  /** rotateHandlerSecret replaces the signing secret; the old one keeps signing during `overlap`. */
  rotateHandlerSecret(name: string, rotation: SecretRotation = {}): Promise<HandlerConfig> {
    return this.request("POST", `/v1/handlers/${encodeURIComponent(name)}/rotate-secret`, rotation);
  }

  // Queues.

  /** putQueue creates a queue or changes its settings (pause, in-flight cap, batch, retention, fairness). */
  putQueue(name: string, settings: QueuePut): Promise<Queue> {
    return this.request("PUT", `/v1/queues/${encodeURIComponent(name)}`, settings);
  }

  getQueue(name: string): Promise<Queue> {
    return this.request("GET", `/v1/queues/${encodeURIComponent(name)}`);
  }

  async listQueues(): Promise<Queue[]> {
    return (await this.request<Schemas["QueueList"]>("GET", "/v1/queues")).queues;
  }
}
