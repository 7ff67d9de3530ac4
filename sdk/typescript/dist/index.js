// @gendurable/sdk: a client for gendurable's REST API and a step handler for its webhooks,
// on nothing but the platform's fetch and Web Crypto. Node http/Express and AWS Lambda
// adapters live in "@gendurable/sdk/node" and "@gendurable/sdk/lambda".
export * from "./client.js";
export * from "./problem.js";
export * from "./serve.js";
export * from "./signature.js";
