// The npm package piston-client as it is published (1.0.2), against
// sandcell's Piston v2 API: driven by rest_test.go. Its runtimes() works;
// its execute() posts text/plain (node-fetch's default for a string
// body), which Piston's router refuses with 415, and so does sandcell.
//
// usage: node unmodified.mjs URL
// Prints {runtimes: N, execute: ANSWER} and exits 0.

import piston from 'piston-client';

const client = piston({ server: process.argv[2] });
const runtimes = await client.runtimes();
const execute = await client.execute('python', 'print(1)');
console.log(JSON.stringify({ runtimes: runtimes.length, execute }));
