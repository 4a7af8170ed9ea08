'use strict';
/**
 * A TOML reader (TOML 1.0) for the Rust client's policy files, with no dependency: tables,
 * arrays of tables, dotted keys, inline tables, arrays, basic and literal strings (and their
 * multi-line forms), integers (decimal, hex, octal, binary, underscores), floats, booleans.
 * Dates are refused (no policy field takes one). Integers are BigInt past 2^53. Errors name
 * the line.
 */

class TomlError extends Error {}

const BARE = /^[A-Za-z0-9_-]+/;
const MAX_DEPTH = 64;

function parse(text) {
  const root = {};
  // Tables defined by a header, and arrays of tables, to refuse redefinitions.
  const defined = new Set();
  const arrays = new Set();
  let index = 0;
  let line = 1;
  const fail = (what) => {
    throw new TomlError(`line ${line}: ${what}`);
  };
  const peek = () => text[index];
  const skipSpace = () => {
    while (index < text.length && (text[index] === ' ' || text[index] === '\t')) index += 1;
  };
  const skipComment = () => {
    if (text[index] === '#') {
      while (index < text.length && text[index] !== '\n') {
        const code = text.charCodeAt(index);
        if ((code < 0x20 && code !== 0x09) || code === 0x7f) fail('a control character in a comment');
        index += 1;
      }
    }
  };
  const endOfLine = () => {
    skipSpace();
    skipComment();
    if (index >= text.length) return;
    if (text.startsWith('\r\n', index)) index += 2;
    else if (text[index] === '\n') index += 1;
    else fail(`unexpected '${text[index]}' after a value`);
    line += 1;
  };
  const skipBlank = () => {
    for (;;) {
      skipSpace();
      skipComment();
      if (text.startsWith('\r\n', index)) {
        index += 2;
        line += 1;
      } else if (text[index] === '\n') {
        index += 1;
        line += 1;
      } else return;
    }
  };
  const escape = () => {
    const char = text[index];
    index += 1;
    const simple = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };
    if (char in simple) return simple[char];
    if (char === 'u' || char === 'U') {
      const length = char === 'u' ? 4 : 8;
      const hex = text.slice(index, index + length);
      if (!new RegExp(`^[0-9A-Fa-f]{${length}}$`).test(hex)) fail('a bad unicode escape');
      index += length;
      const code = parseInt(hex, 16);
      if (code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) fail('a unicode escape that is no scalar value');
      return String.fromCodePoint(code);
    }
    return fail(`a bad escape '\\${char}'`);
  };
  const string = () => {
    if (text.startsWith('"""', index)) {
      index += 3;
      if (text.startsWith('\r\n', index)) index += 2;
      else if (text[index] === '\n') index += 1;
      let out = '';
      for (;;) {
        if (index >= text.length) fail('an unterminated string');
        if (text.startsWith('"""', index)) {
          // Up to two quotes may end the content just before the closing three.
          let run = 0;
          while (text[index + run] === '"') run += 1;
          if (run > 5) fail('too many quotes closing a string');
          index += run;
          return out + '"'.repeat(run - 3);
        }
        const char = text[index];
        if (char === '\\') {
          index += 1;
          if (/^[ \t]*\r?\n/.test(text.slice(index, index + 200))) {
            while (index < text.length && /[ \t\r\n]/.test(text[index])) {
              if (text[index] === '\n') line += 1;
              index += 1;
            }
            continue;
          }
          out += escape();
          continue;
        }
        if (char === '\n') line += 1;
        out += char;
        index += 1;
      }
    }
    if (text.startsWith("'''", index)) {
      index += 3;
      if (text.startsWith('\r\n', index)) index += 2;
      else if (text[index] === '\n') index += 1;
      const end = text.indexOf("'''", index);
      if (end < 0) fail('an unterminated string');
      const out = text.slice(index, end);
      line += (out.match(/\n/g) || []).length;
      index = end + 3;
      return out;
    }
    const quote = text[index];
    index += 1;
    let out = '';
    for (;;) {
      if (index >= text.length || text[index] === '\n') fail('an unterminated string');
      const char = text[index];
      if (char === quote) {
        index += 1;
        return out;
      }
      if (quote === '"' && char === '\\') {
        index += 1;
        out += escape();
        continue;
      }
      const code = char.charCodeAt(0);
      if ((code < 0x20 && code !== 0x09) || code === 0x7f) fail('a control character in a string');
      out += char;
      index += 1;
    }
  };
  const key = () => {
    const parts = [];
    for (;;) {
      skipSpace();
      const char = peek();
      if (char === '"' || char === "'") parts.push(string());
      else {
        const match = BARE.exec(text.slice(index, index + 256));
        if (match === null) fail('a key was expected');
        parts.push(match[0]);
        index += match[0].length;
      }
      skipSpace();
      if (peek() !== '.') return parts;
      index += 1;
    }
  };
  const number = (word) => {
    const clean = word.replace(/_/g, '');
    if (/^[+-]?(0|[1-9](_?\d)*)$/.test(word)) {
      const value = BigInt(clean);
      if (value > 9223372036854775807n || value < -9223372036854775808n) fail(`an integer out of range: ${word}`);
      return Number.isSafeInteger(Number(value)) ? Number(value) : value;
    }
    if (/^0x[0-9A-Fa-f](_?[0-9A-Fa-f])*$/.test(word) || /^0o[0-7](_?[0-7])*$/.test(word) || /^0b[01](_?[01])*$/.test(word)) {
      const value = BigInt(clean);
      return Number.isSafeInteger(Number(value)) ? Number(value) : value;
    }
    if (/^[+-]?(inf|nan)$/.test(word)) return word.includes('nan') ? NaN : word.startsWith('-') ? -Infinity : Infinity;
    if (/^[+-]?(0|[1-9](_?\d)*)(\.\d(_?\d)*)?([eE][+-]?\d(_?\d)*)?$/.test(word) && /[.eE]/.test(word)) return Number(clean);
    return fail(`a bad value '${word}'`);
  };
  const value = (depth) => {
    if (depth > MAX_DEPTH) fail('arrays or inline tables nested too deeply');
    skipSpace();
    const char = peek();
    if (char === '"' || char === "'") return string();
    if (char === '[') {
      index += 1;
      const array = [];
      for (;;) {
        skipBlank();
        if (peek() === ']') {
          index += 1;
          return array;
        }
        array.push(value(depth + 1));
        skipBlank();
        if (peek() === ',') index += 1;
        else if (peek() === ']') {
          index += 1;
          return array;
        } else fail("',' or ']' was expected in an array");
      }
    }
    if (char === '{') {
      index += 1;
      const table = {};
      skipSpace();
      if (peek() === '}') {
        index += 1;
        return table;
      }
      for (;;) {
        const parts = key();
        if (peek() !== '=') fail("'=' was expected");
        index += 1;
        assign(table, parts, value(depth + 1), new Set());
        skipSpace();
        if (peek() === ',') index += 1;
        else if (peek() === '}') {
          index += 1;
          return table;
        } else fail("',' or '}' was expected in an inline table");
      }
    }
    const match = /^[^\s,\]}#]+/.exec(text.slice(index, index + 128));
    if (match === null) fail('a value was expected');
    index += match[0].length;
    if (match[0] === 'true') return true;
    if (match[0] === 'false') return false;
    if (/^\d{4}-\d{2}-\d{2}/.test(match[0]) || /^\d{2}:\d{2}/.test(match[0])) fail('dates and times are not read here');
    return number(match[0]);
  };
  const isTable = (item) => item !== null && typeof item === 'object' && !Array.isArray(item);
  const assign = (table, parts, item, frozen) => {
    let current = table;
    for (const part of parts.slice(0, -1)) {
      if (!(part in current)) current[part] = {};
      else if (!isTable(current[part]) || frozen.has(current[part])) fail(`'${part}' is not a table here`);
      current = current[part];
    }
    const last = parts[parts.length - 1];
    if (Object.prototype.hasOwnProperty.call(current, last)) fail(`'${parts.join('.')}' is defined twice`);
    current[last] = item;
  };
  let current = root;
  const inline = new Set();
  skipBlank();
  while (index < text.length) {
    if (peek() === '[') {
      const isArray = text[index + 1] === '[';
      index += isArray ? 2 : 1;
      const parts = key();
      if (!text.startsWith(isArray ? ']]' : ']', index)) fail(`'${isArray ? ']]' : ']'}' was expected`);
      index += isArray ? 2 : 1;
      let table = root;
      parts.forEach((part, position) => {
        const lastPart = position === parts.length - 1;
        const path = parts.slice(0, position + 1).join('\u0000');
        if (lastPart && isArray) {
          if (!(part in table)) {
            table[part] = [];
            arrays.add(path);
          } else if (!arrays.has(path)) fail(`'${parts.join('.')}' is not an array of tables`);
          const entry = {};
          table[part].push(entry);
          table = entry;
          return;
        }
        if (!(part in table)) table[part] = {};
        let next = table[part];
        if (Array.isArray(next)) {
          if (!arrays.has(path)) fail(`'${part}' is not a table`);
          next = next[next.length - 1];
        } else if (!isTable(next) || inline.has(next)) fail(`'${part}' is not a table`);
        if (lastPart) {
          if (defined.has(path)) fail(`table '${parts.join('.')}' is defined twice`);
          defined.add(path);
        }
        table = next;
      });
      current = table;
      endOfLine();
    } else {
      const parts = key();
      if (peek() !== '=') fail("'=' was expected after a key");
      index += 1;
      const item = value(0);
      if (isTable(item)) inline.add(item);
      assign(current, parts, item, inline);
      endOfLine();
    }
    skipBlank();
  }
  return root;
}

module.exports = { parse, TomlError };
