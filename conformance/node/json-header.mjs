// node --import ./node/json-header.mjs: the npm piston-client, its code
// unmodified, posting its JSON with Content-Type: application/json.
//
// piston-client 1.0.2 posts with node-fetch's default Content-Type for a
// string body, text/plain;charset=UTF-8, which Piston's router refuses
// with 415 "requests must be of type application/json" (api/src/api/v2.js);
// its users send the header themselves (dthree/node-piston pull request 4
// adds it to lib/post.js). This module hook resolves the client's
// node-fetch to fetch-json.mjs, which adds the header, so that the Piston
// flows run through the client's own request shapes.

import { isMainThread } from 'node:worker_threads';

if (isMainThread) {
  const { register } = await import('node:module');
  register(import.meta.url);
}

export async function resolve(specifier, context, next) {
  if (specifier === 'node-fetch' && context.parentURL?.includes('/piston-client/')) {
    return { url: new URL('./fetch-json.mjs', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
