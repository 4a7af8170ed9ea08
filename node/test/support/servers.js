'use strict';
/**
 * Real redis-server processes for the tests: free loopback ports, their own temporary
 * directories, always stopped by pid (a test's `after` hook, and an exit hook for a run that
 * dies). A server with the module, one without it (the Functions library), one with FUNCTION
 * renamed away (scripts). A test missing what it needs fails loudly.
 */

const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');

const REPOSITORY = path.resolve(__dirname, '..', '..', '..');
const SERVER = process.env.REDIS_SERVER || 'redis-server';
const CLI = process.env.REDIS_CLI || (SERVER.endsWith('-server') ? `${SERVER.slice(0, -'-server'.length)}-cli` : 'redis-cli');

function modulePath() {
  const file = process.env.RL_MODULE_PATH || path.join(REPOSITORY, 'target', 'release', 'libredis_ratelimit.so');
  if (!fs.existsSync(file)) {
    throw new Error(`${file} is missing: build the module first (make node-test does: cargo build --release)`);
  }
  return file;
}

/** The node-redis package (Debian's node-redis, NODE_PATH=/usr/share/nodejs); missing, it fails loudly. */
function redisPackage() {
  try {
    return require('redis');
  } catch (error) {
    throw new Error(
      `NODE-REDIS MISSING: ${error.message}; install it (apt-get install node-redis, as scripts/prereqs.sh does) and run with NODE_PATH=/usr/share/nodejs`,
    );
  }
}

function portIsFree(port) {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** A free port whose cluster bus port (+10000) is free too. */
async function freePort() {
  for (let attempt = 0; attempt < 100; attempt += 1) {
    const port = await new Promise((resolve, reject) => {
      const probe = net.createServer();
      probe.once('error', reject);
      probe.listen(0, '127.0.0.1', () => {
        const { port: found } = probe.address();
        probe.close(() => resolve(found));
      });
    });
    if (port > 55535) continue;
    if (await portIsFree(port + 10000)) return port;
  }
  throw new Error('no free port with a free cluster bus port');
}

let shim = null;

/** The conformance suite's clock shim (tests/conformance/fake_clock.c), built once per run with cc. */
function clockShim() {
  if (shim === null) {
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-shim-')), 'fake_clock.so');
    execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', out, path.join(REPOSITORY, 'tests', 'conformance', 'fake_clock.c')]);
    shim = out;
  }
  return shim;
}

/**
 * Runs `pid` ahead of the CPU burners and of the test process, as a Redis on a host of its own
 * runs (needs root or CAP_SYS_NICE; without, says so): a test of exactness measures the
 * client's timing, not the store's starvation.
 */
function favour(pid) {
  try {
    os.setPriority(pid, -10);
  } catch (error) {
    process.emitWarning(`cannot raise redis-server's priority (${error.code}): on a loaded machine the store may be starved past the timeout`);
  }
}

/** `count` processes spinning on the CPU until stop() (by pid), so this process runs late. */
function cpuBurners(count = 2) {
  const burners = Array.from({ length: count }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  const group = {
    stop() {
      burning.delete(group);
      for (const burner of burners) {
        if (burner.exitCode === null && burner.signalCode === null) burner.kill('SIGKILL');
      }
    },
  };
  burning.add(group);
  return group;
}

const running = new Set();
const burning = new Set();
process.on('exit', () => {
  for (const server of running) server.kill();
  for (const group of burning) group.stop();
  if (shim !== null) fs.rmSync(path.dirname(shim), { recursive: true, force: true });
});
// A run stopped from outside (a timeout's SIGTERM, Ctrl-C) stops its servers too, by pid.
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => process.exit(128 + (signal === 'SIGTERM' ? 15 : 2)));
}

/** The three backends: how a server is started for each. */
const BACKENDS = {
  module: { module: true, args: [] },
  functions: { module: false, args: ['--enable-module-command', 'no'] },
  scripts: { module: false, args: ['--rename-command', 'FUNCTION', '""'] },
};

class Server {
  constructor(process, port, dir) {
    this.process = process;
    this.port = port;
    this.dir = dir;
    this.clients = [];
  }

  /** Starts a server (`module`: load the module; `args`: more arguments). */
  static async start({ module = true, args = [], program = SERVER, clockUs = null } = {}) {
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-redis-'));
      const port = await freePort();
      const command = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', 'log', '--save', '', '--appendonly', 'no', '--protected-mode', 'no'];
      if (module) command.push('--loadmodule', modulePath());
      command.push(...args.map((arg) => (arg === '""' ? '' : arg)));
      const env = { ...process.env };
      let clockFile = null;
      if (clockUs !== null) {
        clockFile = path.join(dir, 'clock');
        writeClock(clockFile, clockUs);
        env.LD_PRELOAD = clockShim();
        env.RL_FAKE_CLOCK_FILE = clockFile;
      }
      const child = spawn(program, command, { cwd: dir, stdio: 'ignore', env });
      const server = new Server(child, port, dir);
      server.clockFile = clockFile;
      running.add(server);
      if (await server.waitReady()) return server;
      const log = fs.existsSync(path.join(dir, 'log')) ? fs.readFileSync(path.join(dir, 'log'), 'utf8') : '';
      server.kill();
      if (attempt === 4) throw new Error(`redis-server did not start (${program}); log:\n${log.slice(-2000)}`);
    }
    throw new Error('unreachable');
  }

  static startBackend(backend, { args = [], clockUs = null } = {}) {
    const spec = BACKENDS[backend];
    return Server.start({ module: spec.module, args: [...spec.args, ...args], clockUs });
  }

  /** Sets the server's clock (Unix µs, a BigInt), for a server started with `clockUs`. */
  setClock(nowUs) {
    if (this.clockFile === null) throw new Error('this server runs on the real clock');
    writeClock(this.clockFile, nowUs);
  }

  async waitReady() {
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline) {
      if (this.process.exitCode !== null) return false;
      try {
        if ((await this.cli(['PING'])).trim() === 'PONG') return true;
      } catch {
        // not yet
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return false;
  }

  /** Runs redis-cli against this server; resolves with its output. */
  cli(args) {
    return new Promise((resolve, reject) => {
      const child = spawn(CLI, ['-p', String(this.port), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (chunk) => {
        out += chunk;
      });
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`redis-cli exited ${code}`))));
    });
  }

  /** A connected node-redis client (closed by stop()). */
  async client(options = {}) {
    const { createClient } = redisPackage();
    const { socket = {}, ...rest } = options;
    const client = createClient({ ...rest, socket: { host: '127.0.0.1', port: this.port, ...socket } });
    client.on('error', () => {});
    await client.connect();
    this.clients.push(client);
    return client;
  }

  pause() {
    this.process.kill('SIGSTOP');
  }

  resume() {
    this.process.kill('SIGCONT');
  }

  kill() {
    running.delete(this);
    if (this.process.exitCode === null && this.process.signalCode === null) {
      try {
        this.process.kill('SIGCONT');
        this.process.kill('SIGKILL');
      } catch {
        // gone already
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** Kills the server (by pid) and waits for it to exit, leaving its clients open (reconnecting). */
  async halt() {
    const exited = new Promise((resolve) => {
      if (this.process.exitCode !== null || this.process.signalCode !== null) resolve();
      else this.process.once('exit', resolve);
    });
    this.kill();
    await exited;
  }

  async stop() {
    for (const client of this.clients.splice(0)) {
      try {
        await client.disconnect();
      } catch {
        // already closed
      }
    }
    const exited = new Promise((resolve) => {
      if (this.process.exitCode !== null || this.process.signalCode !== null) resolve();
      else this.process.once('exit', resolve);
    });
    this.kill();
    await exited;
  }

  /** Calls of every command but INFO itself (INFO commandstats). */
  async commandCalls() {
    const text = await this.cli(['INFO', 'commandstats']);
    let calls = 0;
    for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (match[1] !== 'info') calls += Number(match[2]);
    return calls;
  }
}

/**
 * Writes the instant in place: the server maps the file, and truncating it (as a plain rewrite
 * does) would make it read past the end (SIGBUS).
 */
function writeClock(file, nowUs) {
  const buffer = Buffer.alloc(8);
  buffer.writeBigInt64LE(BigInt(nowUs));
  const descriptor = fs.openSync(file, fs.existsSync(file) ? 'r+' : 'w');
  try {
    fs.writeSync(descriptor, buffer, 0, 8, 0);
  } finally {
    fs.closeSync(descriptor);
  }
}

/** A loopback Redis Cluster of `primaries` primaries, no replicas. */
class Cluster {
  static async start(primaries = 3, { module = true } = {}) {
    const cluster = new Cluster();
    cluster.nodes = [];
    try {
      for (let index = 0; index < primaries; index += 1) {
        cluster.nodes.push(
          await Server.start({ module, args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'] }),
        );
      }
      execFileSync(CLI, ['--cluster', 'create', ...cluster.nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], {
        stdio: 'ignore',
        timeout: 60000,
      });
      const deadline = Date.now() + 30000;
      for (;;) {
        const states = await Promise.all(cluster.nodes.map((n) => n.cli(['CLUSTER', 'INFO'])));
        if (states.every((state) => state.includes('cluster_state:ok'))) break;
        if (Date.now() > deadline) throw new Error('the cluster did not converge');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** A connected node-redis cluster client. */
  async client() {
    const { createCluster } = redisPackage();
    const client = createCluster({ rootNodes: this.nodes.map((n) => ({ socket: { host: '127.0.0.1', port: n.port } })) });
    client.on('error', () => {});
    await client.connect();
    this.clients = [...(this.clients || []), client];
    return client;
  }

  async stop() {
    for (const client of (this.clients || []).splice(0)) {
      try {
        await client.disconnect();
      } catch {
        // already closed
      }
    }
    await Promise.all(this.nodes.map((node) => node.stop()));
  }
}

module.exports = { REPOSITORY, BACKENDS, Server, Cluster, redisPackage, modulePath, freePort, favour, cpuBurners };
