// Compile-time checks of the typed client, run by `tsc --noEmit` in `npm run build` (this
// file is not imported by the dashboard, so it is not bundled). Each @ts-expect-error
// fails the build if the call below it ever type-checks, i.e. if the client stopped
// checking paths, parameters or bodies against the spec.
import { api, must } from './api';

export async function typecheck() {
  // @ts-expect-error a path the spec does not have
  await must(api.GET('/v1/no-such-path'));
  // @ts-expect-error the path parameter is required
  await must(api.GET('/v1/jobs/{id}'));
  // @ts-expect-error the path parameter is a number
  await must(api.GET('/v1/jobs/{id}', { params: { path: { id: '7' } } }));
  // @ts-expect-error the signal body is required
  await must(api.POST('/v1/jobs/{id}/signals', { params: { path: { id: 1 } } }));
  // @ts-expect-error limit is a number
  await must(api.PUT('/v1/gates/{key}', { params: { path: { key: 'k' } }, body: { limit: 'two', shards: 1 } }));
  // @ts-expect-error a misspelt field in a body (limit is then missing). An extra field beside
  // all the required ones is not caught: openapi-fetch infers the init object generically.
  await must(api.PUT('/v1/gates/{key}', { params: { path: { key: 'k' } }, body: { limitt: 2, shards: 1 } }));
  // @ts-expect-error a status the spec does not list
  await must(api.GET('/v1/jobs', { params: { query: { status: 'bogus' } } }));
  const page = await must(api.GET('/v1/jobs'));
  // @ts-expect-error the response is typed: handler is a string
  const n: number = page.jobs[0].handler;
  return n;
}
