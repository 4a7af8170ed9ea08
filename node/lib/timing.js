'use strict';
/**
 * When a store call has timed out: when the store is silent, never when this process is late.
 *
 * A call times out when nothing was read on its connection for a whole timeout since the call
 * was handed to the connection or since that connection's last reply, looked at only after this
 * process had the chance to read what waits on its sockets (the look runs in a setImmediate
 * after its timer: the event loop's poll phase, which reads the sockets, comes in between); or,
 * however recently the connection last read, when it was handed to the connection
 * HARD_BOUND_TIMEOUTS timeouts ago (a store that trickles replies, or one that stopped reading).
 * A burst that keeps this process busy for longer than a timeout therefore waits for the
 * store's answers, read as soon as the event loop runs again; a stopped, paused or unreachable
 * store still fails every call within about a timeout. The Rust client's limiter/groups.rs and
 * the Python client's timing.py state the same rule.
 */

const { performance } = require('node:perf_hooks');
const { StoreError } = require('./errors');
const { isErrorReply } = require('./protocol');

/** A call this many timeouts old fails however recently its connection read a reply. */
const HARD_BOUND_TIMEOUTS = 20;

const now = () => performance.now();

/** Whether a call sent at `sentMs` on a connection that last read at `readMs` has timed out at `nowMs`. */
function timedOut(nowMs, sentMs, readMs, timeoutMs) {
  if (nowMs - sentMs >= HARD_BOUND_TIMEOUTS * timeoutMs) return true;
  return nowMs - Math.max(sentMs, readMs) >= timeoutMs;
}

/** The instant at which timedOut may first hold (if nothing is read before). */
function nextLook(sentMs, readMs, timeoutMs) {
  return Math.min(Math.max(sentMs, readMs) + timeoutMs, sentMs + HARD_BOUND_TIMEOUTS * timeoutMs);
}

/**
 * Sends `args` on `connection` (about `key`), bounded by the rule above: resolves with the
 * reply, or with the Error the client raised, or with StoreError('timeout') (the command is
 * then taken out of the client's queue if it was not written yet). Never rejects.
 */
function timedSend(connection, args, key, timeoutMs) {
  return new Promise((resolve) => {
    const channel = connection.channelFor(key);
    const sentMs = now();
    const controller = new AbortController();
    let done = false;
    let timer = null;
    const finish = (value) => {
      if (done) return;
      done = true;
      if (timer !== null) clearTimeout(timer);
      resolve(value);
    };
    const look = () => {
      timer = null;
      setImmediate(() => {
        if (done) return;
        const at = now();
        if (timedOut(at, sentMs, channel.readAt, timeoutMs)) {
          controller.abort();
          finish(new StoreError('timeout'));
          return;
        }
        timer = setTimeout(look, Math.max(nextLook(sentMs, channel.readAt, timeoutMs) - at, 1));
      });
    };
    let sent;
    try {
      sent = connection.send(args, { key, signal: controller.signal });
    } catch (error) {
      finish(error);
      return;
    }
    sent.then(
      (reply) => {
        channel.readAt = now();
        finish(reply);
      },
      (error) => {
        if (isErrorReply(error)) channel.readAt = now();
        finish(error instanceof Error ? error : new Error(String(error)));
      },
    );
    if (!done) timer = setTimeout(look, timeoutMs);
  });
}

module.exports = { HARD_BOUND_TIMEOUTS, timedOut, nextLook, timedSend, now };
