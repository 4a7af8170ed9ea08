// The ESM entry (package.json's exports map): the CommonJS package's exports, named (Node
// finds the names in index.js's `module.exports = {...}`) and as the default.
export * from './index.js';
export { default } from './index.js';
