"""Integer helpers and the exact number parser of the Rust core (``core/src/number.rs``,
``core/src/time.rs``).

Python integers never overflow, so every place where the Rust core saturates or truncates an
``i64``/``u64`` does so here explicitly, with the same rounding: that is what makes the local
fallback decide exactly as the module (the golden vectors check it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
U128_MAX = (1 << 128) - 1

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_SECOND = 1_000_000_000
US_PER_MS = 1_000
US_PER_SECOND = 1_000_000

#: Latest server time (Unix µs) the algorithms compute with: 2^62 ns, in 2116.
MAX_NOW_US = (1 << 62) // 1_000
#: Shortest window: one millisecond.
MIN_WINDOW_US = US_PER_MS
#: Longest window: 100 Julian years, in microseconds.
MAX_WINDOW_US = 100 * 31_557_600 * US_PER_SECOND


def sat_i64(value: int) -> int:
    """``value`` saturated to an ``i64``."""
    return I64_MIN if value < I64_MIN else I64_MAX if value > I64_MAX else value


def sat_u64(value: int) -> int:
    """``value`` saturated to a ``u64``."""
    return 0 if value < 0 else U64_MAX if value > U64_MAX else value


def clamp(value: int, low: int, high: int) -> int:
    return low if value < low else high if value > high else value


def tdiv(numerator: int, divisor: int) -> int:
    """Rust's ``/`` on signed integers: the quotient truncated towards zero."""
    quotient = abs(numerator) // abs(divisor)
    return quotient if (numerator < 0) == (divisor < 0) else -quotient


def trem(numerator: int, divisor: int) -> int:
    """Rust's ``%`` on signed integers: the remainder has the sign of the numerator."""
    return numerator - divisor * tdiv(numerator, divisor)


def ceil_div(numerator: int, divisor: int) -> int:
    """``⌈numerator / divisor⌉`` for a positive divisor."""
    return -((-numerator) // divisor)


def ceil_ms_from_ns(ns: int) -> int:
    """Milliseconds in ``ns``, rounded up (0 for none or negative), as a ``u64``."""
    return 0 if ns <= 0 else min(ceil_div(ns, NS_PER_MS), U64_MAX)


def ceil_ms_from_us(us: int) -> int:
    """Milliseconds in ``us``, rounded up (0 for none or negative), as a ``u64``."""
    return 0 if us <= 0 else min(ceil_div(us, US_PER_MS), U64_MAX)


def expiry_ms_from_ns(instant_ns: int) -> int:
    """The key expiry (Unix ms) of a state unused from ``instant_ns`` on: rounded up, >= 1."""
    return max(sat_i64(ceil_div(instant_ns, NS_PER_MS)), 1)


def expiry_ms_from_us(instant_us: int) -> int:
    """The key expiry (Unix ms) of a state unused from ``instant_us`` on: rounded up, >= 1."""
    return max(sat_i64(ceil_div(instant_us, US_PER_MS)), 1)


def window_start_us(now_us: int, window_us: int) -> int:
    """Start of the epoch-aligned window of ``window_us`` holding ``now_us``."""
    window = max(window_us, 1)
    start = (now_us // window) * window
    return start if start >= I64_MIN else I64_MIN


class NumberError(enum.Enum):
    """Why a text is not an acceptable number (the Rust core's ``NumberError``)."""

    MALFORMED = "Malformed"
    NOT_FINITE = "NotFinite"
    NEGATIVE = "Negative"
    ZERO = "Zero"
    TOO_LARGE = "TooLarge"


class NumberParseError(ValueError):
    def __init__(self, kind: NumberError) -> None:
        super().__init__(kind.value)
        self.kind = kind


_MAX_EXPONENT_DIGITS = 6
_POWERS = [10**index for index in range(39)]
_NON_FINITE = (b"nan", b"inf", b"infinity")


def _pow10(power: int) -> int | None:
    return _POWERS[power] if 0 <= power < len(_POWERS) else None


def _unsigned_part(text: bytes) -> bytes:
    if text[:1].isdigit() or text[:1] == b".":
        return text
    unsigned = text[1:] if text[:1] in (b"-", b"+") else text
    if unsigned.lower() in _NON_FINITE:
        raise NumberParseError(NumberError.NOT_FINITE)
    if text[:1] == b"-":
        numeric = bool(unsigned) and all(chr(b) in "0123456789.eE" for b in unsigned)
        raise NumberParseError(NumberError.NEGATIVE if numeric else NumberError.MALFORMED)
    if len(unsigned) != len(text) or not text:
        raise NumberParseError(NumberError.MALFORMED)
    return text


def parse_positive_integer(text: bytes) -> int:
    """A strictly positive integer of ASCII digits only (at most ``u64::MAX``)."""
    digits = _unsigned_part(text)
    value = 0
    for byte in digits:
        if not 48 <= byte <= 57:
            raise NumberParseError(NumberError.MALFORMED)
        value = value * 10 + (byte - 48)
        if value > U64_MAX:
            raise NumberParseError(NumberError.TOO_LARGE)
    if value == 0:
        raise NumberParseError(NumberError.ZERO)
    return value


def _parse_exponent(text: bytes) -> int:
    negative = text[:1] == b"-"
    digits = text[1:] if text[:1] in (b"-", b"+") else text
    if not digits:
        raise NumberParseError(NumberError.MALFORMED)
    if len(digits) > _MAX_EXPONENT_DIGITS:
        raise NumberParseError(NumberError.TOO_LARGE)
    value = 0
    for byte in digits:
        if not 48 <= byte <= 57:
            raise NumberParseError(NumberError.MALFORMED)
        value = value * 10 + (byte - 48)
    return -value if negative else value


@dataclass(frozen=True, slots=True)
class Decimal:
    """A positive decimal held exactly as ``digits × 10^exponent`` (``digits`` a ``u128``)."""

    digits: int
    exponent: int

    @staticmethod
    def parse_positive(text: bytes) -> Decimal:
        """Parses ``[digits][.digits][(e|E)[+|-]digits]``; refuses zero, signs, junk."""
        rest = _unsigned_part(text)
        digits = 0
        pending_zeros = 0
        fraction_digits = 0
        written_exponent = 0
        seen_digit = False
        in_fraction = False
        index = 0
        while index < len(rest):
            byte = rest[index]
            if byte == 48:
                pending_zeros += 1
                fraction_digits += int(in_fraction)
                seen_digit = True
            elif 49 <= byte <= 57:
                scale = _pow10(pending_zeros + 1)
                if scale is None:
                    raise NumberParseError(NumberError.TOO_LARGE)
                digits = digits * scale + (byte - 48)
                if digits > U128_MAX:
                    raise NumberParseError(NumberError.TOO_LARGE)
                pending_zeros = 0
                fraction_digits += int(in_fraction)
                seen_digit = True
            elif byte == 46 and not in_fraction:
                in_fraction = True
            elif byte in (101, 69) and seen_digit:
                written_exponent = _parse_exponent(rest[index + 1 :])
                break
            else:
                raise NumberParseError(NumberError.MALFORMED)
            index += 1
        if not seen_digit:
            raise NumberParseError(NumberError.MALFORMED)
        if digits == 0:
            raise NumberParseError(NumberError.ZERO)
        return Decimal(digits, written_exponent + pending_zeros - fraction_digits)

    def ceil_reciprocal(self, numerator: int) -> int | None:
        """``ceil(numerator / self)`` when it fits in a ``u64``."""
        scale = _pow10(abs(self.exponent))
        if scale is None:
            return None
        if self.exponent <= 0:
            top, bottom = numerator * scale, self.digits
            if top > U128_MAX:
                return None
        else:
            top, bottom = numerator, self.digits * scale
            if bottom > U128_MAX:
                return None
        value = ceil_div(top, bottom)
        return value if value <= U64_MAX else None

    def ceil_times(self, factor: int) -> int | None:
        """``ceil(self × factor)`` when it fits in a ``u64``."""
        product = self.digits * factor
        if product > U128_MAX:
            return None
        if self.exponent >= 0:
            scale = _pow10(self.exponent)
            if scale is None or product * scale > U128_MAX:
                return None
            value = product * scale
        else:
            scale = _pow10(-self.exponent)
            value = 1 if scale is None else ceil_div(product, scale)
        return value if value <= U64_MAX else None

    def exceeds_power_of_ten(self, power: int) -> bool:
        """``self > 10^power``, exactly."""
        shift = power - self.exponent
        if shift < 0:
            return True
        limit = _pow10(shift)
        return limit is not None and self.digits > limit
