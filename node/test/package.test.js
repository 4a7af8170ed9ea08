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
const path = require('node:path');
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
