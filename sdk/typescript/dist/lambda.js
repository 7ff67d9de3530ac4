// The adapter from a fetch-style handler (serve's) to AWS Lambda behind a function URL or
// an API Gateway HTTP API: both send the payload format 2.0 event and read the same result.
import { base64ToBytes } from "./base64.js";
/** requestFromEvent turns a payload format 2.0 event into a web-standard Request. */
export function requestFromEvent(event) {
    const headers = new Headers();
    for (const [name, value] of Object.entries(event.headers ?? {})) {
        if (value !== undefined)
            headers.set(name, value);
    }
    if (event.cookies?.length)
        headers.set("cookie", event.cookies.join("; "));
    const method = event.requestContext?.http?.method ?? "GET";
    const host = event.requestContext?.domainName ?? headers.get("host") ?? "localhost";
    const path = event.rawPath ?? event.requestContext?.http?.path ?? "/";
    const url = `https://${host}${path}${event.rawQueryString ? "?" + event.rawQueryString : ""}`;
    let body;
    if (event.body != null && method !== "GET" && method !== "HEAD") {
        body = event.isBase64Encoded ? base64ToBytes(event.body) : event.body;
    }
    return new Request(url, { method, headers, body });
}
/** resultFromResponse turns a Response into the Lambda result (text bodies as they are). */
export async function resultFromResponse(response) {
    const headers = {};
    response.headers.forEach((value, name) => {
        headers[name] = value;
    });
    return { statusCode: response.status, headers, body: await response.text(), isBase64Encoded: false };
}
/**
 * lambdaHandler adapts a fetch-style handler to a Lambda handler for function URLs and API
 * Gateway v2: `export const handler = lambdaHandler(serve(steps, { secret }))`.
 */
export function lambdaHandler(handler) {
    return async (event) => resultFromResponse(await handler(requestFromEvent(event)));
}
