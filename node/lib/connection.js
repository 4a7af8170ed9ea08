'use strict';
/**
 * The user's Redis client, whatever it is, seen as one interface: node-redis v4+
 * (`sendCommand(args, options)`), a node-redis cluster (`sendCommand(firstKey, isReadonly,
 * args, options)`, with the slot key this client chooses itself, so node-redis's own routing
 * of EVAL/EVALSHA/FCALL, redis/node-redis#2811, never decides) and ioredis (`call`),
 * detected by shape.
 *
 * A write is never sent twice:
 * - node-redis never resends a command whose reply was lost (the commands waiting for a reply
 *   are rejected when the connection breaks), and a command is not handed to a client that is
 *   not ready, so its offline queue never holds a charge to replay on reconnect. A call that
 *   timed out is not aborted: node-redis 4.5.1's per-command AbortSignal, fired once the
 *   command has been written, corrupted its queue here ("Got an unexpected reply from Redis"
 *   thrown from its socket handler, or a hung event loop, in 4 of 5 runs of 1,000 checks on
 *   the scripts backend; 0 of 5 without it). Such a command, if node-redis had not written it
 *   yet (its socket's buffer full), is written later: a charge that lands late, never twice.
 * - ioredis resends unanswered commands after a reconnect (autoResendUnfulfilledCommands) and
 *   retries: the limiter uses a connection of its own, `client.duplicate()` without them.
 */

const { StoreError } = require('./errors');

/** The Redis Cluster hash slot of `key` (its {hash tag} if any): CRC16 (XMODEM) mod 16384. */
function keySlot(key) {
  let data = Buffer.from(key, 'utf8');
  const start = data.indexOf(0x7b);
  if (start >= 0) {
    const end = data.indexOf(0x7d, start + 1);
    if (end > start + 1) data = data.subarray(start + 1, end);
  }
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit += 1) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/**
 * What the limiter reads silence on: one per connection (per node of a cluster). `readAt`:
 * when a reply last came in (performance.now() ms).
 */
class Channel {
  constructor() {
    this.readAt = 0;
  }
}

/** Marks the replies of every primary of a cluster (loading code). */
function everywhereReplies(replies) {
  const marked = [...replies];
  marked.everywhere = true;
  return marked;
}

const NOT_READY = 'the connection is not ready (connecting, or reconnecting after a failure)';

class NodeRedisConnection {
  constructor(client) {
    this.client = client;
    this.cluster = false;
    this.channel = new Channel();
  }

  channelFor() {
    return this.channel;
  }

  ready() {
    return this.client.isReady !== false;
  }

  send(args, { signal }) {
    if (!this.ready()) return Promise.reject(new StoreError('unavailable', NOT_READY));
    return this.client.sendCommand(args);
  }

}

class NodeRedisClusterConnection {
  constructor(cluster) {
    this.client = cluster;
    this.cluster = true;
    this.channels = new Map();
  }

  node(key) {
    try {
      return this.client.getSlotMaster(keySlot(key));
    } catch {
      return undefined;
    }
  }

  channelFor(key) {
    const node = key === null ? undefined : this.node(key);
    const id = node === undefined ? '*' : node.address || node.id || `${node.host}:${node.port}`;
    let channel = this.channels.get(id);
    if (channel === undefined) {
      channel = new Channel();
      this.channels.set(id, channel);
    }
    return channel;
  }

  ready(key) {
    if (key === null) return true;
    const node = this.node(key);
    return !(node && node.client && node.client.isReady === false);
  }

  send(args, { key = null, signal }) {
    if (!this.ready(key)) return Promise.reject(new StoreError('unavailable', NOT_READY));
    return this.client.sendCommand(key === null ? undefined : key, false, args);
  }

  /** The connection to each primary (for what goes to every one: loading code). */
  primaries() {
    return this.client.getMasters().map((master) => {
      if (!master.client) throw new StoreError('unavailable', `no connection to ${master.address || master.id}`);
      return new NodeRedisConnection(master.client);
    });
  }

}

class IoredisConnection {
  constructor(client) {
    // A connection of the limiter's own: ioredis would resend a charge whose reply was lost.
    this.client =
      typeof client.duplicate === 'function'
        ? client.duplicate({ autoResendUnfulfilledCommands: false, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
        : client;
    this.cluster = false;
    this.channel = new Channel();
  }

  channelFor() {
    return this.channel;
  }

  ready() {
    return this.client.status === undefined || this.client.status === 'ready';
  }

  send(args, { signal }) {
    if (!this.ready()) return Promise.reject(new StoreError('unavailable', NOT_READY));
    const [name, ...rest] = args;
    const sent = this.client.call(name, ...rest);
    if (signal) signal.addEventListener('abort', () => sent.catch(() => {}), { once: true });
    return sent;
  }


  close() {
    if (typeof this.client.disconnect === 'function') this.client.disconnect();
  }
}

/**
 * The connection for `client`: node-redis (client or cluster) or ioredis, by shape; or an
 * object already speaking this interface (`send(args, { key, signal })`, `channelFor(key)`,
 * `cluster`, and on a cluster `primaries()`), for other clients.
 */
function connectionOf(client) {
  if (client === null || typeof client !== 'object') {
    throw new TypeError('the limiter needs a Redis client: node-redis (createClient, createCluster) or ioredis');
  }
  if (typeof client.channelFor === 'function' && typeof client.send === 'function') return client;
  if (client.isCluster === true && typeof client.call === 'function') {
    throw new TypeError(
      'an ioredis Cluster cannot send a module command to its key slot: use node-redis createCluster, or ioredis on one server',
    );
  }
  if (typeof client.getSlotMaster === 'function' && typeof client.getMasters === 'function') {
    return new NodeRedisClusterConnection(client);
  }
  if (typeof client.sendCommand === 'function') return new NodeRedisConnection(client);
  if (typeof client.call === 'function') return new IoredisConnection(client);
  throw new TypeError('the limiter needs a Redis client: node-redis (sendCommand) or ioredis (call)');
}

module.exports = { keySlot, connectionOf, Channel, everywhereReplies };
