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
    requestContext?: {
        domainName?: string;
        http?: {
            method?: string;
            path?: string;
        };
    };
}
/** LambdaHttpResult is the structured answer a function URL or HTTP API turns into the HTTP response. */
export interface LambdaHttpResult {
    statusCode: number;
    headers: Record<string, string>;
    body: string;
    isBase64Encoded: boolean;
}
/** requestFromEvent turns a payload format 2.0 event into a web-standard Request. */
export declare function requestFromEvent(event: LambdaHttpEvent): Request;
/** resultFromResponse turns a Response into the Lambda result (text bodies as they are). */
export declare function resultFromResponse(response: Response): Promise<LambdaHttpResult>;
/**
 * lambdaHandler adapts a fetch-style handler to a Lambda handler for function URLs and API
 * Gateway v2: `export const handler = lambdaHandler(serve(steps, { secret }))`.
 */
export declare function lambdaHandler(handler: (request: Request) => Promise<Response>): (event: LambdaHttpEvent) => Promise<LambdaHttpResult>;
