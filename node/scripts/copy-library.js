'use strict';
/**
 * Copies the repository's Functions library (functions/ratelimit.lua: one source) into the
 * package (lib/ratelimit.lua), which ships it: `npm pack`/`npm install` run it (prepare), and so
 * does `make node-test`; test/package.test.js checks the copy is identical. A package required
 * straight from a clone that never ran it reads ../functions/ratelimit.lua instead.
 */

const fs = require('node:fs');
const path = require('node:path');

const source = path.join(__dirname, '..', '..', 'functions', 'ratelimit.lua');
const target = path.join(__dirname, '..', 'lib', 'ratelimit.lua');

if (fs.existsSync(source)) {
  const text = fs.readFileSync(source);
  if (!fs.existsSync(target) || !fs.readFileSync(target).equals(text)) {
    fs.writeFileSync(target, text);
    console.log(`copied ${path.relative(process.cwd(), source)} to ${path.relative(process.cwd(), target)}`);
  }
} else if (!fs.existsSync(target)) {
  console.error(`copy-library: neither ${source} nor ${target} exists: the package has no Functions library`);
  process.exitCode = 1;
}
