// A gendurable step handler as a Next.js (App Router) route handler, on Vercel or any
// Next.js host: the approval flow of docs/protocol.md. Register both handlers with the
// route's URL, e.g. https://<app>.vercel.app/api/steps, and the secret in GENDURABLE_SECRET.
//
// "expense" spawns a "notify" child that tells the approver, then awaits an "approved" or
// "rejected" signal for up to 72 hours, then finishes with the decision.
import { serve, type StepFunction } from "@gendurable/sdk";

// The SDK needs only fetch and Web Crypto, so the route also runs on the Edge runtime.
export const dynamic = "force-dynamic";

interface Expense {
  amount: number;
  approver: string;
}

const decision = { await: { signals: ["approved", "rejected"], timeout: "72h" } };

const expense: StepFunction<Expense> = (step) => {
  if (step.job.step === 0) {
    return { spawn: { children: [{ handler: "notify", input: { to: step.job.input.approver, amount: step.job.input.amount } }] } };
  }
  // A decision delivered with this step is taken whatever woke it: one sent while the job
  // waited for its children arrives with the children's step, which consumes it.
  const answer = step.signals.find((s) => s.name === "approved" || s.name === "rejected");
  if (answer) return { done: { result: { decision: answer.name, details: answer.payload } } };
  if (step.wake === "children") {
    if (step.children?.[0]?.status !== "done") return { fail: { error: { message: "could not notify the approver" } } };
    return decision;
  }
  if (step.wake === "timeout") return { fail: { error: { message: "no decision within 72h" } } };
  return decision; // woken by another signal: keep waiting
};

const notify: StepFunction<{ to: string }> = (step) => {
  console.log(`notify ${step.job.input.to}`); // a real handler would send an email here
  return { done: { result: { sent: true } } };
};

let handler: ((request: Request) => Promise<Response>) | undefined;

export async function POST(request: Request): Promise<Response> {
  handler ??= serve({ expense, notify }, { secret: process.env.GENDURABLE_SECRET ?? "" });
  return handler(request);
}
