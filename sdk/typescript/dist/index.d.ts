export * from "./client.js";
export * from "./problem.js";
export * from "./serve.js";
export * from "./signature.js";
export type { components, operations, paths } from "./api-types.js";
