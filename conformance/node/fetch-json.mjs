// node-fetch for piston-client with the header its post.js leaves out
// (see json-header.mjs).
import fetch from 'node-fetch';

export default (url, opts) =>
  fetch(url, typeof opts?.body === 'string' ? { ...opts, headers: { 'Content-Type': 'application/json', ...opts.headers } } : opts);
