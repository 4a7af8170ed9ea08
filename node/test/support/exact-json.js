'use strict';
/**
 * JSON with exact integers: parse() reads every integer as a BigInt (JSON.parse would round
 * those past 2^53), stringify() writes BigInts as plain integers. For the golden vectors,
 * whose states and expiries are u64/i64 values.
 */

function parse(text) {
  let index = 0;
  const fail = (what) => {
    throw new SyntaxError(`exact-json: ${what} at offset ${index}`);
  };
  const space = () => {
    while (index < text.length && ' \t\r\n'.includes(text[index])) index += 1;
  };
  const value = () => {
    space();
    const char = text[index];
    if (char === '{') {
      index += 1;
      const object = {};
      space();
      if (text[index] === '}') {
        index += 1;
        return object;
      }
      for (;;) {
        space();
        if (text[index] !== '"') fail('expected a key');
        const key = string();
        space();
        if (text[index] !== ':') fail('expected ":"');
        index += 1;
        object[key] = value();
        space();
        if (text[index] === ',') index += 1;
        else if (text[index] === '}') {
          index += 1;
          return object;
        } else fail('expected "," or "}"');
      }
    }
    if (char === '[') {
      index += 1;
      const array = [];
      space();
      if (text[index] === ']') {
        index += 1;
        return array;
      }
      for (;;) {
        array.push(value());
        space();
        if (text[index] === ',') index += 1;
        else if (text[index] === ']') {
          index += 1;
          return array;
        } else fail('expected "," or "]"');
      }
    }
    if (char === '"') return string();
    if (text.startsWith('true', index)) {
      index += 4;
      return true;
    }
    if (text.startsWith('false', index)) {
      index += 5;
      return false;
    }
    if (text.startsWith('null', index)) {
      index += 4;
      return null;
    }
    const match = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(index, index + 400));
    if (match === null) fail('unexpected text');
    index += match[0].length;
    return match[1] === undefined && match[2] === undefined ? BigInt(match[0]) : Number(match[0]);
  };
  const string = () => {
    const start = index;
    index += 1;
    let escaped = false;
    while (index < text.length) {
      const char = text[index];
      if (escaped) escaped = false;
      else if (char === '\\') escaped = true;
      else if (char === '"') break;
      index += 1;
    }
    index += 1;
    return JSON.parse(text.slice(start, index));
  };
  const result = value();
  space();
  if (index !== text.length) fail('trailing text');
  return result;
}

function stringify(value) {
  return JSON.stringify(value, (_, item) => (typeof item === 'bigint' ? `\u0000${item}\u0000` : item)).replace(
    /"\\u0000(-?\d+)\\u0000"/g,
    '$1',
  );
}

module.exports = { parse, stringify };
