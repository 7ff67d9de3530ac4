// A gendurable step handler on AWS Lambda, behind a function URL or an API Gateway HTTP
// API (payload format 2.0): a welcome email in two steps, render then send, with the
// secret in the GENDURABLE_SECRET environment variable.
//
//   Handler: index.handler   Runtime: nodejs20.x   Function URL: auth NONE (the webhook signature authenticates)
import { serve, type StepFunction } from "@gendurable/sdk";
import { lambdaHandler } from "@gendurable/sdk/lambda";

interface Welcome {
  email: string;
}

const welcome: StepFunction<Welcome, { subject: string }> = (step) => {
  if (step.job.step === 0) {
    return { next: { state: { subject: `Welcome, ${step.job.input.email}` } } };
  }
  // Sending twice is what at-least-once delivery allows: dedupe on step.job.id + step.job.step.
  return { done: { result: { sent: true, to: step.job.input.email, subject: step.job.state?.subject } } };
};

export const handler = lambdaHandler(serve({ welcome }, { secret: process.env.GENDURABLE_SECRET ?? "" }));
