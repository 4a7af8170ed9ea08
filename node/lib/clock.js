'use strict';
/**
 * The local fallback's clock: monotonic, anchored to the wall clock once, in Unix µs (BigInt).
 * A wall-clock step does not refill local limits early or freeze them.
 */

const { performance } = require('node:perf_hooks');

const anchorWallUs = BigInt(Date.now()) * 1000n;
const anchorMonotonicMs = performance.now();

function nowUs() {
  return anchorWallUs + BigInt(Math.floor((performance.now() - anchorMonotonicMs) * 1000));
}

module.exports = { nowUs };
