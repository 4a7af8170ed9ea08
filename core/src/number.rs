//! Exact parsing of the numbers clients send: integers and decimals.
//!
//! Client arguments are binary strings. Rust's `str::parse::<f64>` accepts `NaN`, `inf`,
//! `infinity` and silently turns `1e400` into infinity, and floats cannot represent `0.1`
//! anyway. Rates and durations are therefore parsed as exact decimals (`digits × 10^exp`)
//! and converted to integer time units with explicit rounding.

/// Why a client string is not an acceptable number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    /// Not a number in the accepted syntax (empty, letters, spaces, trailing junk, hex...).
    Malformed,
    /// `NaN`, `inf`, `infinity` in any case or sign.
    NotFinite,
    /// A number below zero (including `-0`).
    Negative,
    /// Exactly zero where a positive number is required.
    Zero,
    /// Larger than the type can hold, or more significant digits than are kept exactly.
    TooLarge,
}

/// Longest exponent accepted in `1e<exp>`; anything larger is out of every range anyway.
const MAX_EXPONENT_DIGITS: usize = 6;

/// Parses a strictly positive integer written as ASCII digits only.
///
/// Signs, spaces, decimal points and exponents are refused: `"5"` is a count, `"5.0"` is not.
pub fn parse_positive_integer(text: &[u8]) -> Result<u64, NumberError> {
    let digits = unsigned_part(text)?;
    let mut value: u64 = 0;
    for &byte in digits {
        let digit = ascii_digit(byte).ok_or(NumberError::Malformed)?;
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or(NumberError::TooLarge)?;
    }
    if value == 0 {
        Err(NumberError::Zero)
    } else {
        Ok(value)
    }
}

/// Parses a signed integer: an optional `+` or `-`, then ASCII digits, within an `i64`
/// (the syntax redis-cell accepts for `CL.THROTTLE`'s arguments).
pub fn parse_integer(text: &[u8]) -> Result<i64, NumberError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if is_non_finite_word(digits) {
        return Err(NumberError::NotFinite);
    }
    if digits.is_empty() {
        return Err(NumberError::Malformed);
    }
    let mut value: i64 = 0;
    for &byte in digits {
        let digit = i64::from(ascii_digit(byte).ok_or(NumberError::Malformed)?);
        // Accumulate towards the sign so that i64::MIN parses.
        value = value
            .checked_mul(10)
            .and_then(|v| {
                if negative {
                    v.checked_sub(digit)
                } else {
                    v.checked_add(digit)
                }
            })
            .ok_or(NumberError::TooLarge)?;
    }
    Ok(value)
}

/// A non-negative decimal number held exactly as `digits × 10^exponent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    digits: u128,
    exponent: i32,
}

impl Decimal {
    /// Parses `[digits][.digits][(e|E)[+|-]digits]`, with at least one digit before the
    /// exponent, and refuses zero: every decimal argument of this module must be positive.
    pub fn parse_positive(text: &[u8]) -> Result<Self, NumberError> {
        let mut rest = unsigned_part(text)?;
        let mut digits: u128 = 0;
        // Zeros read but not yet multiplied in: only needed once a non-zero digit follows,
        // so trailing zeros ("1.000…", "1000…") never overflow the digits.
        let mut pending_zeros: u32 = 0;
        let mut fraction_digits: i32 = 0;
        let mut written_exponent = 0;
        let mut seen_digit = false;
        let mut in_fraction = false;
        while let Some((&byte, tail)) = rest.split_first() {
            match byte {
                b'0' => {
                    pending_zeros = pending_zeros.saturating_add(1);
                    fraction_digits = fraction_digits.saturating_add(i32::from(in_fraction));
                    seen_digit = true;
                }
                b'1'..=b'9' => {
                    let scale =
                        pow10(pending_zeros.saturating_add(1)).ok_or(NumberError::TooLarge)?;
                    digits = digits
                        .checked_mul(scale)
                        .and_then(|d| d.checked_add(u128::from(byte.wrapping_sub(b'0'))))
                        .ok_or(NumberError::TooLarge)?;
                    pending_zeros = 0;
                    fraction_digits = fraction_digits.saturating_add(i32::from(in_fraction));
                    seen_digit = true;
                }
                b'.' if !in_fraction => in_fraction = true,
                b'e' | b'E' if seen_digit => {
                    written_exponent = parse_exponent(tail)?;
                    break;
                }
                _ => return Err(NumberError::Malformed),
            }
            rest = tail;
        }
        if !seen_digit {
            return Err(NumberError::Malformed);
        }
        if digits == 0 {
            return Err(NumberError::Zero);
        }
        // The pending zeros were counted as digits of the value: add them to the exponent.
        let exponent = written_exponent
            .saturating_add(i32::try_from(pending_zeros).unwrap_or(i32::MAX))
            .saturating_sub(fraction_digits);
        Ok(Self { digits, exponent })
    }

    /// `ceil(numerator / self)` when it fits in a `u64`; `None` when it does not.
    ///
    /// Used to turn a rate (units per second) into whole nanoseconds per unit.
    pub fn ceil_reciprocal(self, numerator: u64) -> Option<u64> {
        // numerator / (digits × 10^exponent) = numerator × 10^-exponent / digits
        let (top, bottom) = if self.exponent <= 0 {
            let scale = pow10(self.exponent.unsigned_abs())?;
            (u128::from(numerator).checked_mul(scale)?, self.digits)
        } else {
            let scale = pow10(self.exponent.unsigned_abs())?;
            (u128::from(numerator), self.digits.checked_mul(scale)?)
        };
        // Both usually fit in 64 bits, where division is several times cheaper.
        match (u64::try_from(top), u64::try_from(bottom)) {
            (Ok(top), Ok(bottom)) => Some(top.div_ceil(bottom)),
            _ => u64::try_from(top.div_ceil(bottom)).ok(),
        }
    }

    /// `ceil(self × factor)` when it fits in a `u64`; `None` when it does not.
    ///
    /// Used to turn seconds into whole microseconds (`factor = 1_000_000`).
    pub fn ceil_times(self, factor: u64) -> Option<u64> {
        let product = self.digits.checked_mul(u128::from(factor))?;
        let value = if self.exponent >= 0 {
            product.checked_mul(pow10(self.exponent.unsigned_abs())?)?
        } else {
            match pow10(self.exponent.unsigned_abs()) {
                Some(scale) => product.div_ceil(scale),
                // 10^-39 or smaller times a u128: a positive value below one, which rounds up.
                None => 1,
            }
        };
        u64::try_from(value).ok()
    }

    /// `self > 10^power`, decided exactly.
    pub fn exceeds_power_of_ten(self, power: u32) -> bool {
        // digits × 10^exponent > 10^power  ⇔  digits > 10^(power − exponent)
        let shift = i64::from(power).saturating_sub(i64::from(self.exponent));
        match u32::try_from(shift) {
            Ok(shift) => pow10(shift).is_some_and(|limit| self.digits > limit),
            Err(_) => true, // shift < 0: the bound is below one, and digits ≥ 1.
        }
    }
}

/// Strips nothing but checks for the forms every numeric argument refuses, so both parsers
/// report NaN/inf and negatives the same way.
fn unsigned_part(text: &[u8]) -> Result<&[u8], NumberError> {
    if text
        .first()
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
    {
        return Ok(text); // the common case: nothing to strip or refuse up front
    }
    let unsigned = match text.split_first() {
        Some((b'-', rest)) | Some((b'+', rest)) => rest,
        _ => text,
    };
    if is_non_finite_word(unsigned) {
        return Err(NumberError::NotFinite);
    }
    if text.first() == Some(&b'-') {
        let numeric = !unsigned.is_empty()
            && unsigned
                .iter()
                .all(|&b| b.is_ascii_digit() || b == b'.' || b == b'e' || b == b'E');
        return Err(if numeric {
            NumberError::Negative
        } else {
            NumberError::Malformed
        });
    }
    if unsigned.len() != text.len() || text.is_empty() {
        return Err(NumberError::Malformed);
    }
    Ok(text)
}

fn is_non_finite_word(text: &[u8]) -> bool {
    [&b"nan"[..], b"inf", b"infinity"]
        .iter()
        .any(|word| text.eq_ignore_ascii_case(word))
}

fn parse_exponent(text: &[u8]) -> Result<i32, NumberError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > MAX_EXPONENT_DIGITS {
        return Err(if digits.is_empty() {
            NumberError::Malformed
        } else {
            NumberError::TooLarge
        });
    }
    let mut value: i32 = 0;
    for &byte in digits {
        let digit = ascii_digit(byte).ok_or(NumberError::Malformed)?;
        // At most six digits: cannot overflow an i32.
        value = value.saturating_mul(10).saturating_add(i32::from(digit));
    }
    Ok(if negative {
        value.saturating_neg()
    } else {
        value
    })
}

fn ascii_digit(byte: u8) -> Option<u8> {
    byte.is_ascii_digit().then(|| byte.wrapping_sub(b'0'))
}

/// 10^0 ..= 10^38: every power of ten a u128 holds.
// Evaluated at compile time, where an out-of-range index or an overflow fails the build.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const POWERS_OF_TEN: [u128; 39] = {
    let mut table = [1u128; 39];
    let mut index = 1;
    while index < table.len() {
        table[index] = table[index - 1] * 10;
        index += 1;
    }
    table
};

/// 10^power as a u128, or `None` above 10^38.
fn pow10(power: u32) -> Option<u128> {
    usize::try_from(power)
        .ok()
        .and_then(|index| POWERS_OF_TEN.get(index).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_accept_digits_only() {
        assert_eq!(parse_positive_integer(b"1"), Ok(1));
        assert_eq!(parse_positive_integer(b"007"), Ok(7));
        assert_eq!(
            parse_positive_integer(b"18446744073709551615"),
            Ok(u64::MAX)
        );
        assert_eq!(
            parse_positive_integer(b"18446744073709551616"),
            Err(NumberError::TooLarge)
        );
        assert_eq!(parse_positive_integer(b"0"), Err(NumberError::Zero));
        assert_eq!(parse_positive_integer(b"-1"), Err(NumberError::Negative));
        assert_eq!(parse_positive_integer(b"-0"), Err(NumberError::Negative));
        for bad in [
            &b""[..],
            b" 5",
            b"5 ",
            b"5abc",
            b"0x10",
            b"1e3",
            b"5.0",
            b".",
            b"+5",
            b"-",
        ] {
            assert_eq!(
                parse_positive_integer(bad),
                Err(NumberError::Malformed),
                "{bad:?}"
            );
        }
        for word in [&b"nan"[..], b"NaN", b"inf", b"-inf", b"+inf", b"Infinity"] {
            assert_eq!(
                parse_positive_integer(word),
                Err(NumberError::NotFinite),
                "{word:?}"
            );
        }
    }

    #[test]
    fn signed_integers() {
        assert_eq!(parse_integer(b"42"), Ok(42));
        assert_eq!(parse_integer(b"+42"), Ok(42));
        assert_eq!(parse_integer(b"-42"), Ok(-42));
        assert_eq!(parse_integer(b"0"), Ok(0));
        assert_eq!(parse_integer(b"-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(
            parse_integer(b"9223372036854775808"),
            Err(NumberError::TooLarge)
        );
        assert_eq!(parse_integer(b"-inf"), Err(NumberError::NotFinite));
        for bad in [
            &b""[..],
            b"-",
            b"+",
            b" 1",
            b"1 ",
            b"1.0",
            b"1e3",
            b"0x1",
            b"--1",
        ] {
            assert_eq!(parse_integer(bad), Err(NumberError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn decimals_are_exact() {
        let d = |s: &str| Decimal::parse_positive(s.as_bytes());
        assert_eq!(
            d("0.5"),
            Ok(Decimal {
                digits: 5,
                exponent: -1
            })
        );
        assert_eq!(
            d("250000"),
            Ok(Decimal {
                digits: 25,
                exponent: 4
            })
        );
        assert_eq!(
            d(".25"),
            Ok(Decimal {
                digits: 25,
                exponent: -2
            })
        );
        assert_eq!(
            d("5."),
            Ok(Decimal {
                digits: 5,
                exponent: 0
            })
        );
        assert_eq!(
            d("2.5e-3"),
            Ok(Decimal {
                digits: 25,
                exponent: -4
            })
        );
        assert_eq!(
            d("1E+3"),
            Ok(Decimal {
                digits: 1,
                exponent: 3
            })
        );
        assert_eq!(d("0"), Err(NumberError::Zero));
        assert_eq!(d("0.000"), Err(NumberError::Zero));
        assert_eq!(d("-1"), Err(NumberError::Negative));
        assert_eq!(d("-0.5"), Err(NumberError::Negative));
        for bad in [
            "", ".", "e3", "1e", "1e+", "1.2.3", "1..2", " 1", "1 ", "0x10", "1,5", "--1",
        ] {
            assert_eq!(d(bad), Err(NumberError::Malformed), "{bad:?}");
        }
        for word in ["nan", "-nan", "inf", "+inf", "-inf", "INFINITY"] {
            assert_eq!(d(word), Err(NumberError::NotFinite), "{word:?}");
        }
        assert_eq!(d("1e1234567"), Err(NumberError::TooLarge));
        let many_zeros = format!("1.{}", "0".repeat(60));
        assert_eq!(
            d(&many_zeros),
            Ok(Decimal {
                digits: 1,
                exponent: 0
            })
        );
        assert_eq!(
            d(&format!("1{}", "0".repeat(60))),
            Ok(Decimal {
                digits: 1,
                exponent: 60
            })
        );
        assert_eq!(
            d("100"),
            Ok(Decimal {
                digits: 1,
                exponent: 2
            })
        );
        assert_eq!(
            d("0.0100"),
            Ok(Decimal {
                digits: 1,
                exponent: -2
            })
        );
        assert_eq!(
            d("1.05"),
            Ok(Decimal {
                digits: 105,
                exponent: -2
            })
        );
        assert_eq!(d(&"9".repeat(40)), Err(NumberError::TooLarge));
        assert!(
            d("1e400").is_ok(),
            "finite but out of every range: the caller decides"
        );
    }

    #[test]
    fn reciprocal_rounds_up() {
        let d = |s: &str| Decimal::parse_positive(s.as_bytes()).unwrap();
        const NS: u64 = 1_000_000_000;
        assert_eq!(d("1").ceil_reciprocal(NS), Some(NS));
        assert_eq!(d("0.5").ceil_reciprocal(NS), Some(2 * NS));
        assert_eq!(d("3").ceil_reciprocal(NS), Some(333_333_334));
        assert_eq!(d("250000").ceil_reciprocal(NS), Some(4_000));
        assert_eq!(d("1e9").ceil_reciprocal(NS), Some(1));
        assert_eq!(
            d("2e9").ceil_reciprocal(NS),
            Some(1),
            "below one rounds up to one"
        );
        assert_eq!(d("1e-30").ceil_reciprocal(NS), None);
        assert_eq!(d("1e400").ceil_reciprocal(NS), None);
    }

    #[test]
    fn scaling_rounds_up() {
        let d = |s: &str| Decimal::parse_positive(s.as_bytes()).unwrap();
        assert_eq!(d("0.25").ceil_times(1_000_000), Some(250_000));
        assert_eq!(d("86400").ceil_times(1_000_000), Some(86_400_000_000));
        assert_eq!(d("0.0000001").ceil_times(1_000_000), Some(1));
        assert_eq!(d("1e-300").ceil_times(1_000_000), Some(1));
        assert_eq!(d("1e300").ceil_times(1_000_000), None);
    }

    #[test]
    fn power_of_ten_comparison_is_exact() {
        let d = |s: &str| Decimal::parse_positive(s.as_bytes()).unwrap();
        assert!(!d("999999999").exceeds_power_of_ten(9));
        assert!(!d("1000000000").exceeds_power_of_ten(9));
        assert!(!d("1e9").exceeds_power_of_ten(9));
        assert!(d("1000000000.001").exceeds_power_of_ten(9));
        assert!(!d("0.0001").exceeds_power_of_ten(0));
        assert!(d("1e400").exceeds_power_of_ten(9));
        assert!(!d("1e-400").exceeds_power_of_ten(9));
    }
}
