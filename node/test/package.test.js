'use strict';
/**
 * The package as shipped: the Functions library's copy (lib/ratelimit.lua, made by
 * scripts/copy-library.js) is identical to the repository's functions/ratelimit.lua (one
 * source); the ESM entry exports exactly what the CommonJS one does; the exports map and
 * files name what exists.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const protocol = require('../lib/protocol');

const ROOT = path.join(__dirname, '..');

test('the shipped Functions library is the repository file, byte for byte', () => {
  assert.ok(fs.existsSync(protocol.LIBRARY_COPY), `${protocol.LIBRARY_COPY} is missing: run node scripts/copy-library.js`);
  const copy = fs.readFileSync(protocol.LIBRARY_COPY);
  const source = fs.readFileSync(path.join(ROOT, '..', 'functions', 'ratelimit.lua'));
  assert.ok(copy.equals(source), 'lib/ratelimit.lua differs from functions/ratelimit.lua: run node scripts/copy-library.js');
  assert.equal(protocol.librarySource(), source.toString('utf8'));
  assert.ok(protocol.librarySource().startsWith('#!lua name=ratelimit'));
});

test('the ESM entry exports exactly the CommonJS exports', async () => {
  const cjs = require('../lib');
  const esm = await import(path.join(ROOT, 'lib', 'index.mjs'));
  const named = Object.keys(esm).filter((name) => name !== 'default');
  assert.deepEqual(named.sort(), Object.keys(cjs).sort());
  for (const name of named) assert.equal(esm[name], cjs[name], name);
});

test("package.json's entries exist", () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  assert.equal(manifest.name, 'redis-ratelimit-client');
  assert.equal(manifest.dependencies, undefined, 'no runtime dependency');
  const entry = manifest.exports['.'];
  for (const file of [manifest.main, manifest.types, entry.import, entry.require, entry.types]) {
    assert.ok(fs.existsSync(path.join(ROOT, file)), file);
  }
  for (const file of manifest.files) assert.ok(fs.existsSync(path.join(ROOT, file)), file);
});

test('npm pack, then npm install of the tarball offline, gives a working package (CommonJS and ESM)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-pack-'));
  try {
    const npm = (args, cwd) => execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund'], { cwd, stdio: 'pipe', encoding: 'utf8' });
    let packed;
    try {
      packed = npm(['pack', '--pack-destination', dir], ROOT).trim().split('\n').pop();
    } catch (error) {
      assert.fail(`npm pack failed (npm from Debian's npm package, scripts/prereqs.sh installs it): ${error.message}`);
    }
    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    npm(['install', path.join(dir, packed)], app);
    const installed = path.join(app, 'node_modules', 'redis-ratelimit-client');
    assert.ok(fs.readFileSync(path.join(installed, 'lib', 'ratelimit.lua')).equals(fs.readFileSync(path.join(ROOT, '..', 'functions', 'ratelimit.lua'))));
    const script = "const m = require('redis-ratelimit-client'); console.log(typeof m.RateLimiter, m.Limit.fixedWindow('w', { limit: 1, window: 1, key: 'k' }).name)";
    assert.equal(execFileSync(process.execPath, ['-e', script], { cwd: app, encoding: 'utf8' }).trim(), 'function w');
    const esm = "import { RateLimiter } from 'redis-ratelimit-client'; console.log(typeof RateLimiter)";
    assert.equal(execFileSync(process.execPath, ['--input-type=module', '-e', esm], { cwd: app, encoding: 'utf8' }).trim(), 'function');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
