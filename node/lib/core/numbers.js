'use strict';
/**
 * Integer helpers and the exact number parser of the Rust core (core/src/number.rs,
 * core/src/time.rs), on BigInt.
 *
 * BigInt never overflows, so every place where the Rust core saturates or truncates an
 * i64/u64 does so here explicitly, with the same rounding: that is what makes the local
 * fallback decide exactly as the module (the golden vectors check it). BigInt's `/`
 * truncates towards zero (Rust's `/` on signed integers); floorDiv and ceilDiv are spelled
 * out where the Python port used `//`.
 */

const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;
const U64_MAX = (1n << 64n) - 1n;
const U32_MAX = (1n << 32n) - 1n;
const U128_MAX = (1n << 128n) - 1n;

const NS_PER_US = 1000n;
const NS_PER_MS = 1000000n;
const NS_PER_SECOND = 1000000000n;
const US_PER_MS = 1000n;
const US_PER_SECOND = 1000000n;

/** Latest server time (Unix µs) the algorithms compute with: 2^62 ns, in 2116. */
const MAX_NOW_US = (1n << 62n) / 1000n;
/** Shortest window: one millisecond. */
const MIN_WINDOW_US = US_PER_MS;
/** Longest window: 100 Julian years, in microseconds. */
const MAX_WINDOW_US = 100n * 31557600n * US_PER_SECOND;

const min = (a, b) => (a < b ? a : b);
const max = (a, b) => (a > b ? a : b);

/** `value` saturated to an i64. */
function satI64(value) {
  return value < I64_MIN ? I64_MIN : value > I64_MAX ? I64_MAX : value;
}

/** `value` saturated to a u64. */
function satU64(value) {
  return value < 0n ? 0n : value > U64_MAX ? U64_MAX : value;
}

function clamp(value, low, high) {
  return value < low ? low : value > high ? high : value;
}

/** Rust's `/` on signed integers: the quotient truncated towards zero (BigInt's own). */
function tdiv(numerator, divisor) {
  return numerator / divisor;
}

/** Rust's `%` on signed integers: the remainder has the sign of the numerator (BigInt's own). */
function trem(numerator, divisor) {
  return numerator % divisor;
}

/** ⌊numerator / divisor⌋ for a positive divisor. */
function floorDiv(numerator, divisor) {
  const quotient = numerator / divisor;
  return numerator % divisor !== 0n && numerator < 0n ? quotient - 1n : quotient;
}

/** ⌈numerator / divisor⌉ for a positive divisor. */
function ceilDiv(numerator, divisor) {
  const quotient = numerator / divisor;
  return numerator % divisor !== 0n && numerator > 0n ? quotient + 1n : quotient;
}

/** Milliseconds in `ns`, rounded up (0 for none or negative), as a u64. */
function ceilMsFromNs(ns) {
  return ns <= 0n ? 0n : min(ceilDiv(ns, NS_PER_MS), U64_MAX);
}

/** Milliseconds in `us`, rounded up (0 for none or negative), as a u64. */
function ceilMsFromUs(us) {
  return us <= 0n ? 0n : min(ceilDiv(us, US_PER_MS), U64_MAX);
}

/** The key expiry (Unix ms) of a state unused from `instantNs` on: rounded up, >= 1. */
function expiryMsFromNs(instantNs) {
  return max(satI64(ceilDiv(instantNs, NS_PER_MS)), 1n);
}

/** The key expiry (Unix ms) of a state unused from `instantUs` on: rounded up, >= 1. */
function expiryMsFromUs(instantUs) {
  return max(satI64(ceilDiv(instantUs, US_PER_MS)), 1n);
}

/** Start of the epoch-aligned window of `windowUs` holding `nowUs`. */
function windowStartUs(nowUs, windowUs) {
  const window = max(windowUs, 1n);
  const start = floorDiv(nowUs, window) * window;
  return start >= I64_MIN ? start : I64_MIN;
}

/** Why a text is not an acceptable number (the Rust core's NumberError). */
const NumberError = Object.freeze({
  MALFORMED: 'Malformed',
  NOT_FINITE: 'NotFinite',
  NEGATIVE: 'Negative',
  ZERO: 'Zero',
  TOO_LARGE: 'TooLarge',
});

class NumberParseError extends Error {
  constructor(kind) {
    super(kind);
    this.name = 'NumberParseError';
    this.kind = kind;
  }
}

const MAX_EXPONENT_DIGITS = 6;
const POWERS = Array.from({ length: 39 }, (_, index) => 10n ** BigInt(index));
const NON_FINITE = new Set(['nan', 'inf', 'infinity']);

function pow10(power) {
  return power >= 0 && power < POWERS.length ? POWERS[power] : null;
}

const isDigit = (char) => char >= '0' && char <= '9';

/** The text without a sign, refusing non-finite values, negative numbers and junk, as the core does. */
function unsignedPart(text) {
  const first = text.slice(0, 1);
  if (isDigit(first) || first === '.') return text;
  const unsigned = first === '-' || first === '+' ? text.slice(1) : text;
  if (NON_FINITE.has(unsigned.toLowerCase())) throw new NumberParseError(NumberError.NOT_FINITE);
  if (first === '-') {
    const numeric = unsigned.length > 0 && /^[0-9.eE]+$/.test(unsigned);
    throw new NumberParseError(numeric ? NumberError.NEGATIVE : NumberError.MALFORMED);
  }
  if (unsigned.length !== text.length || text.length === 0) throw new NumberParseError(NumberError.MALFORMED);
  return text;
}

/** A strictly positive integer of ASCII digits only (at most u64::MAX), from text. */
function parsePositiveInteger(text) {
  const digits = unsignedPart(text);
  let value = 0n;
  for (const char of digits) {
    if (!isDigit(char)) throw new NumberParseError(NumberError.MALFORMED);
    value = value * 10n + BigInt(char.charCodeAt(0) - 48);
    if (value > U64_MAX) throw new NumberParseError(NumberError.TOO_LARGE);
  }
  if (value === 0n) throw new NumberParseError(NumberError.ZERO);
  return value;
}

function parseExponent(text) {
  const negative = text.startsWith('-');
  const digits = text.startsWith('-') || text.startsWith('+') ? text.slice(1) : text;
  if (digits.length === 0) throw new NumberParseError(NumberError.MALFORMED);
  if (digits.length > MAX_EXPONENT_DIGITS) throw new NumberParseError(NumberError.TOO_LARGE);
  let value = 0;
  for (const char of digits) {
    if (!isDigit(char)) throw new NumberParseError(NumberError.MALFORMED);
    value = value * 10 + (char.charCodeAt(0) - 48);
  }
  return negative ? -value : value;
}

/** A positive decimal held exactly as `digits × 10^exponent` (`digits` a u128). */
class Decimal {
  constructor(digits, exponent) {
    this.digits = digits;
    this.exponent = exponent;
    Object.freeze(this);
  }

  /** Parses `[digits][.digits][(e|E)[+|-]digits]`; refuses zero, signs, junk. */
  static parsePositive(text) {
    const rest = unsignedPart(text);
    let digits = 0n;
    let pendingZeros = 0;
    let fractionDigits = 0;
    let writtenExponent = 0;
    let seenDigit = false;
    let inFraction = false;
    for (let index = 0; index < rest.length; index += 1) {
      const char = rest[index];
      if (char === '0') {
        pendingZeros += 1;
        fractionDigits += inFraction ? 1 : 0;
        seenDigit = true;
      } else if (char >= '1' && char <= '9') {
        const scale = pow10(pendingZeros + 1);
        if (scale === null) throw new NumberParseError(NumberError.TOO_LARGE);
        digits = digits * scale + BigInt(char.charCodeAt(0) - 48);
        if (digits > U128_MAX) throw new NumberParseError(NumberError.TOO_LARGE);
        pendingZeros = 0;
        fractionDigits += inFraction ? 1 : 0;
        seenDigit = true;
      } else if (char === '.' && !inFraction) {
        inFraction = true;
      } else if ((char === 'e' || char === 'E') && seenDigit) {
        writtenExponent = parseExponent(rest.slice(index + 1));
        break;
      } else {
        throw new NumberParseError(NumberError.MALFORMED);
      }
    }
    if (!seenDigit) throw new NumberParseError(NumberError.MALFORMED);
    if (digits === 0n) throw new NumberParseError(NumberError.ZERO);
    return new Decimal(digits, writtenExponent + pendingZeros - fractionDigits);
  }

  /** ceil(numerator / this) when it fits in a u64, else null. */
  ceilReciprocal(numerator) {
    const scale = pow10(Math.abs(this.exponent));
    if (scale === null) return null;
    let top;
    let bottom;
    if (this.exponent <= 0) {
      top = numerator * scale;
      bottom = this.digits;
      if (top > U128_MAX) return null;
    } else {
      top = numerator;
      bottom = this.digits * scale;
      if (bottom > U128_MAX) return null;
    }
    const value = ceilDiv(top, bottom);
    return value <= U64_MAX ? value : null;
  }

  /** ceil(this × factor) when it fits in a u64, else null. */
  ceilTimes(factor) {
    const product = this.digits * factor;
    if (product > U128_MAX) return null;
    let value;
    if (this.exponent >= 0) {
      const scale = pow10(this.exponent);
      if (scale === null || product * scale > U128_MAX) return null;
      value = product * scale;
    } else {
      const scale = pow10(-this.exponent);
      value = scale === null ? 1n : ceilDiv(product, scale);
    }
    return value <= U64_MAX ? value : null;
  }

  /** this > 10^power, exactly. */
  exceedsPowerOfTen(power) {
    const shift = power - this.exponent;
    if (shift < 0) return true;
    const limit = pow10(shift);
    return limit !== null && this.digits > limit;
  }
}

module.exports = {
  I64_MIN,
  I64_MAX,
  U64_MAX,
  U32_MAX,
  U128_MAX,
  NS_PER_US,
  NS_PER_MS,
  NS_PER_SECOND,
  US_PER_MS,
  US_PER_SECOND,
  MAX_NOW_US,
  MIN_WINDOW_US,
  MAX_WINDOW_US,
  min,
  max,
  satI64,
  satU64,
  clamp,
  tdiv,
  trem,
  floorDiv,
  ceilDiv,
  ceilMsFromNs,
  ceilMsFromUs,
  expiryMsFromNs,
  expiryMsFromUs,
  windowStartUs,
  NumberError,
  NumberParseError,
  Decimal,
  parsePositiveInteger,
};
