// The adapter from a fetch-style handler (serve's) to AWS Lambda behind a function URL or
// an API Gateway HTTP API: both send the payload format 2.0 event and read the same result.

import { base64ToBytes } from "./base64.js";

/** LambdaHttpEvent is the payload format 2.0 event of a function URL or an API Gateway v2 HTTP API. */
export interface LambdaHttpEvent {
  version?: string;
  routeKey?: string;
  rawPath?: string;
  rawQueryString?: string;
  cookies?: string[];
  headers?: Record<string, string | undefined>;
  body?: string | null;
  isBase64Encoded?: boolean;
  requestContext?: { domainName?: string; http?: { method?: string; path?: string } };
}

/** LambdaHttpResult is the structured answer a function URL or HTTP API turns into the HTTP response. */
export interface LambdaHttpResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  isBase64Encoded: boolean;
}

/** requestFromEvent turns a payload format 2.0 event into a web-standard Request. */
export function requestFromEvent(event: LambdaHttpEvent): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    if (value !== undefined) headers.set(name, value);
  }
  if (event.cookies?.length) headers.set("cookie", event.cookies.join("; "));
  const method = event.requestContext?.http?.method ?? "GET";
  const host = event.requestContext?.domainName ?? headers.get("host") ?? "localhost";
  const path = event.rawPath ?? event.requestContext?.http?.path ?? "/";
  const url = `https://${host}${path}${event.rawQueryString ? "?" + event.rawQueryString : ""}`;
  let body: Uint8Array<ArrayBuffer> | string | undefined;
  if (event.body != null && method !== "GET" && method !== "HEAD") {
    body = event.isBase64Encoded ? base64ToBytes(event.body) : event.body;
  }
  return new Request(url, { method, headers, body });
}

/** resultFromResponse turns a Response into the Lambda result (text bodies as they are). */
export async function resultFromResponse(response: Response): Promise<LambdaHttpResult> {
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { statusCode: response.status, headers, body: await response.text(), isBase64Encoded: false };
}

/**
 * lambdaHandler adapts a fetch-style handler to a Lambda handler for function URLs and API
 * Gateway v2: `export const handler = lambdaHandler(serve(steps, { secret }))`.
 */
export function lambdaHandler(
  handler: (request: Request) => Promise<Response>,
): (event: LambdaHttpEvent) => Promise<LambdaHttpResult> {
  return async (event) => resultFromResponse(await handler(requestFromEvent(event)));
}
