'use strict';
/**
 * Where the client logs: the backend resolved, the circuit opening and closing, calls the store
 * refused, checks that could not be made. Silent unless a logger is set with setLogger (any
 * object with info, warn and error, such as `console` or a pino logger), or
 * NODE_DEBUG=redis-ratelimit (node:util's debuglog) for everything.
 */

const util = require('node:util');

const debug = util.debuglog('redis-ratelimit');
let logger = null;

/** Sets the logger (null: silent). */
function setLogger(next) {
  logger = next;
}

function emit(level, message) {
  debug('%s: %s', level, message);
  if (logger !== null && typeof logger[level] === 'function') logger[level](message);
}

module.exports = {
  setLogger,
  info: (message) => emit('info', message),
  warn: (message) => emit('warn', message),
  error: (message) => emit('error', message),
};
