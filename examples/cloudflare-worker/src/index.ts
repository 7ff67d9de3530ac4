// A gendurable step handler as a Cloudflare Worker: the README's quickstart greeter. Every
// job runs three steps (counting in its state) and finishes with a greeting. README.md says
// how to run it locally (wrangler dev, with the secret in .dev.vars) and how to deploy it:
//
//   npx wrangler secret put GENDURABLE_SECRET     # the handler's whsec_… secret
//   npx wrangler deploy
//   curl -X PUT $GENDURABLE/v1/handlers/greeter -H 'Content-Type: application/json' \
//     -d '{"url": "https://greeter.<you>.workers.dev/", "secret": "whsec_…"}'
import { serve, type StepFunction } from "@gendurable/sdk";

export interface Env {
  GENDURABLE_SECRET: string;
}

interface GreeterState {
  count: number;
  log: string[];
}

const greeter: StepFunction<{ name?: string }, GreeterState> = (step) => {
  const state = step.job.state ?? { count: 0, log: [] };
  const next = { count: state.count + 1, log: [...state.log, `step ${step.job.step}, attempt ${step.job.attempt}`] };
  if (next.count < 3) return { next: { state: next } };
  return { done: { result: { greeting: `hello, ${step.job.input?.name ?? "world"}`, steps: next.log } } };
};

let handler: ((request: Request) => Promise<Response>) | undefined;

export default {
  // The Worker's fetch(request, env, ctx): the secret arrives with env, so the handler is
  // made on the first request and kept for the isolate's life.
  async fetch(request: Request, env: Env): Promise<Response> {
    handler ??= serve({ greeter }, { secret: env.GENDURABLE_SECRET });
    return handler(request);
  },
};
