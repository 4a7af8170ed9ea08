'use strict';
/**
 * Key templates (`rl:{{{tenant}}}:{user}`), in the Rust client's syntax (Rust's and Python's
 * format strings): `{name}` is the check's input `name` and a literal brace is doubled. Double
 * them for Redis Cluster hash tags: `rl:{{{tenant}}}` renders `rl:{acme}`.
 */

const NAME = /^[A-Za-z0-9_-]+$/;

/** A key template that cannot be parsed. */
class TemplateError extends Error {}

/** A check did not give an input a key template needs. */
class MissingInput extends Error {
  constructor(name) {
    super(`the key template needs the input '${name}'`);
    this.inputName = name;
  }
}

/** A parsed key template. */
class KeyTemplate {
  constructor(text) {
    if (typeof text !== 'string' || text.length === 0) throw new TemplateError('a key template cannot be empty');
    const unbalanced = () =>
      new TemplateError(`unbalanced brace in key template '${text}' (write {{ and }} for literal braces)`);
    const segments = [];
    let literal = '';
    let index = 0;
    while (index < text.length) {
      const char = text[index];
      const pair = text.slice(index, index + 2);
      if (pair === '{{' || pair === '}}') {
        literal += char;
        index += 2;
        continue;
      }
      if (char === '}') throw unbalanced();
      if (char === '{') {
        const end = text.indexOf('}', index + 1);
        if (end < 0) throw unbalanced();
        const name = text.slice(index + 1, end);
        if (!NAME.test(name)) {
          throw new TemplateError(`bad placeholder {${name}} in '${text}': names are ASCII letters, digits, '_' and '-'`);
        }
        if (literal) {
          segments.push([false, literal]);
          literal = '';
        }
        segments.push([true, name]);
        index = end + 1;
        continue;
      }
      literal += char;
      index += 1;
    }
    if (literal) segments.push([false, literal]);
    this.text = text;
    this.segments = segments;
    Object.freeze(this);
  }

  /** The inputs the template uses, in order (repeats included). */
  inputs() {
    return this.segments.filter(([isInput]) => isInput).map(([, name]) => name);
  }

  /** How many distinct inputs the key depends on (per-user > per-tenant > global). */
  specificity() {
    return new Set(this.inputs()).size;
  }

  /** The key for `inputs` (an object of input values). */
  render(inputs) {
    let out = '';
    for (const [isInput, value] of this.segments) {
      if (!isInput) {
        out += value;
        continue;
      }
      if (!Object.prototype.hasOwnProperty.call(inputs, value) || inputs[value] === undefined || inputs[value] === null) {
        throw new MissingInput(value);
      }
      out += String(inputs[value]);
    }
    return out;
  }

  toString() {
    return this.text;
  }
}

module.exports = { KeyTemplate, MissingInput, TemplateError };
