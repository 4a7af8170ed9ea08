//! A served certificate's validity period (X.509 `notBefore` and `notAfter`), read from its
//! DER without a parser of the whole certificate; warned about when the certificate is
//! expired or not yet valid, and exported as gauges so an alert sees one expire while the
//! service runs.

use std::time::{SystemTime, UNIX_EPOCH};

/// When a certificate is valid, in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// `notBefore`.
    pub not_before_s: i64,
    /// `notAfter`.
    pub not_after_s: i64,
}

impl Validity {
    /// What is wrong with the period at `now_s`, if anything.
    pub fn problem(&self, now_s: i64) -> Option<String> {
        if now_s > self.not_after_s {
            Some(format!(
                "expired {} ago (notAfter {})",
                ago(now_s.saturating_sub(self.not_after_s)),
                self.not_after_s
            ))
        } else if now_s < self.not_before_s {
            Some(format!(
                "not valid for {} yet (notBefore {})",
                ago(self.not_before_s.saturating_sub(now_s)),
                self.not_before_s
            ))
        } else {
            None
        }
    }
}

fn ago(seconds: i64) -> String {
    match seconds {
        0..=172_799 => format!("{seconds} s"),
        _ => format!("{} days", seconds.div_euclid(86_400)),
    }
}

/// One DER element: its tag and contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let bytes = usize::from(first & 0x7f);
            let (length, rest) = (rest.get(..bytes)?, rest.get(bytes..)?);
            let length = length
                .iter()
                .fold(0usize, |total, byte| (total << 8) | usize::from(*byte));
            (length, rest)
        }
        _ => return None,
    };
    Some((tag, rest.get(..length)?, rest.get(length..)?))
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The validity period of a DER certificate; `None` if it is not one.
pub fn validity(der: &[u8]) -> Option<Validity> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    // version [0] (optional), serialNumber, signature, issuer, then validity.
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs)?.2;
    }
    for _ in 0..3 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, period, _) = element(tbs)? else {
        return None;
    };
    let (tag, not_before, rest) = element(period)?;
    let not_before_s = time(tag, not_before)?;
    let (tag, not_after, _) = element(rest)?;
    let not_after_s = time(tag, not_after)?;
    Some(Validity {
        not_before_s,
        not_after_s,
    })
}

/// The DER of the `commonName` attribute type (OID 2.5.4.3).
const COMMON_NAME_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];

/// The subject's common name of a DER certificate (the first, as UTF-8 or printable text);
/// `None` if it has none or is not a certificate. The console names a mutual-TLS user by
/// it.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    // version [0] (optional), serialNumber, signature, issuer, validity, then subject.
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs)?.2;
    }
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, mut names, _) = element(tbs)? else {
        return None;
    };
    // Name: a SEQUENCE of SETs of SEQUENCE { type, value }.
    while !names.is_empty() {
        let (_, set, rest) = element(names)?;
        names = rest;
        let mut attributes = set;
        while !attributes.is_empty() {
            let (_, attribute, rest) = element(attributes)?;
            attributes = rest;
            if let Some(value) = attribute.strip_prefix(COMMON_NAME_OID.as_slice()) {
                let (tag, text, _) = element(value)?;
                // UTF8String, PrintableString, IA5String.
                if matches!(tag, 0x0c | 0x13 | 0x16) {
                    return String::from_utf8(text.to_vec()).ok();
                }
                return None;
            }
        }
    }
    None
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`, years 1950-2049) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`) in Unix seconds.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    if text.last() != Some(&b'Z') {
        return None;
    }
    // The digits from `start`, `count` of them.
    let digits = |start: usize, count: usize| -> Option<i64> {
        let digits = text.get(start..start.checked_add(count)?)?;
        digits.iter().try_fold(0i64, |value, digit| {
            let digit = char::from(*digit).to_digit(10)?;
            value.checked_mul(10)?.checked_add(i64::from(digit))
        })
    };
    let (year, fields_at) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let year = digits(0, 2)?;
            let century = if year < 50 { 2000 } else { 1900 };
            (year.checked_add(century)?, 2)
        }
        (GENERALIZED_TIME, 15) => (digits(0, 4)?, 4),
        _ => return None,
    };
    let mut fields = [0i64; 5];
    for (index, field) in fields.iter_mut().enumerate() {
        *field = digits(index.checked_mul(2)?.checked_add(fields_at)?, 2)?;
    }
    let [month, day, hour, minute, second] = fields;
    let days = days_from_civil(year, month, day)?;
    days.checked_mul(86_400)?
        .checked_add(hour.checked_mul(3_600)?)?
        .checked_add(minute.checked_mul(60)?)?
        .checked_add(second)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_index = month.checked_add(9)?.rem_euclid(12);
    let day_of_year = month_index
        .checked_mul(153)?
        .checked_add(2)?
        .checked_div(5)?
        .checked_add(day)?
        .checked_sub(1)?;
    let day_of_era = year_of_era
        .checked_mul(365)?
        .checked_add(year_of_era.checked_div(4)?)?
        .checked_sub(year_of_era.checked_div(100)?)?
        .checked_add(day_of_year)?;
    era.checked_mul(146_097)?
        .checked_add(day_of_era)?
        .checked_sub(719_468)
}

/// Now, in Unix seconds.
pub fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// Checks the certificate `listener` serves (its chain's first, `der`, read from `file`):
/// warns if it is expired or not yet valid now, and sets its gauges.
pub fn check_served(listener: &'static str, file: &std::path::Path, der: &[u8]) {
    let Some(validity) = validity(der) else {
        tracing::warn!(
            "{}: the {listener} listener's certificate has no validity period this service can read",
            file.display()
        );
        return;
    };
    crate::metrics::certificate(listener, validity.not_before_s, validity.not_after_s);
    if let Some(problem) = validity.problem(now_s()) {
        tracing::warn!(
            "{}: the {listener} listener's certificate is {problem}: clients that check it will refuse every connection",
            file.display()
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    use super::*;

    /// A DER element of `tag` around `contents`.
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if contents.len() < 0x80 {
            out.push(u8::try_from(contents.len()).unwrap());
        } else {
            out.push(0x82);
            out.extend_from_slice(&u16::try_from(contents.len()).unwrap().to_be_bytes());
        }
        out.extend_from_slice(contents);
        out
    }

    #[test]
    fn the_subjects_common_name_is_read_after_other_attributes() {
        let attribute = |oid: &[u8], tag: u8, text: &str| {
            der(
                0x31,
                &der(
                    SEQUENCE,
                    &[der(0x06, oid), der(tag, text.as_bytes())].concat(),
                ),
            )
        };
        let subject = [
            attribute(&[0x55, 0x04, 0x06], 0x13, "FR"),
            attribute(&[0x55, 0x04, 0x03], 0x0c, "carol"),
        ]
        .concat();
        let mut tbs = der(VERSION, &der(0x02, &[2]));
        tbs.extend(der(0x02, &[1; 20]));
        tbs.extend(der(SEQUENCE, &der(0x06, &[1, 2, 3])));
        tbs.extend(der(
            SEQUENCE,
            &attribute(&[0x55, 0x04, 0x03], 0x0c, "the CA"),
        ));
        tbs.extend(der(SEQUENCE, &[0; 10]));
        tbs.extend(der(SEQUENCE, &subject));
        let certificate = der(
            SEQUENCE,
            &[der(SEQUENCE, &tbs), der(SEQUENCE, &[0; 4])].concat(),
        );
        assert_eq!(common_name(&certificate).as_deref(), Some("carol"));
        // No common name, or not a certificate: none, never a panic.
        let mut tbs = der(VERSION, &der(0x02, &[2]));
        tbs.extend(der(0x02, &[1]));
        tbs.extend(der(SEQUENCE, &[]));
        tbs.extend(der(SEQUENCE, &[]));
        tbs.extend(der(SEQUENCE, &[0; 10]));
        tbs.extend(der(SEQUENCE, &attribute(&[0x55, 0x04, 0x06], 0x13, "FR")));
        assert_eq!(common_name(&der(SEQUENCE, &der(SEQUENCE, &tbs))), None);
        assert_eq!(common_name(b"not a certificate"), None);
        assert_eq!(common_name(&[]), None);
    }

    /// A certificate's outline: what `validity` walks, the rest filler.
    fn certificate(not_before: (u8, &str), not_after: (u8, &str)) -> Vec<u8> {
        let mut tbs = der(VERSION, &der(0x02, &[2]));
        tbs.extend(der(0x02, &[1; 20]));
        tbs.extend(der(SEQUENCE, &der(0x06, &[1, 2, 3])));
        tbs.extend(der(SEQUENCE, &[0x31; 150]));
        let mut period = der(not_before.0, not_before.1.as_bytes());
        period.extend(der(not_after.0, not_after.1.as_bytes()));
        tbs.extend(der(SEQUENCE, &period));
        tbs.extend(der(SEQUENCE, &[0; 10]));
        let mut certificate = der(SEQUENCE, &tbs);
        certificate.extend(der(SEQUENCE, &[0; 4]));
        der(SEQUENCE, &certificate)
    }

    #[test]
    fn the_validity_period_in_both_time_forms() {
        let validity = validity(&certificate(
            (UTC_TIME, "200101000000Z"),
            (GENERALIZED_TIME, "20500201123456Z"),
        ))
        .unwrap();
        assert_eq!(validity.not_before_s, 1_577_836_800, "2020-01-01");
        assert_eq!(validity.not_after_s, 2_527_331_696, "2050-02-01 12:34:56");
        assert_eq!(validity.problem(1_600_000_000), None);
        assert!(
            validity
                .problem(1_500_000_000)
                .unwrap()
                .starts_with("not valid for")
        );
        assert!(
            validity
                .problem(2_600_000_000)
                .unwrap()
                .starts_with("expired 841 days ago")
        );
        assert_eq!(
            super::validity(&certificate(
                (UTC_TIME, "491231235959Z"),
                (UTC_TIME, "500101000000Z")
            ))
            .unwrap(),
            Validity {
                not_before_s: 2_524_607_999,
                not_after_s: -631_152_000
            },
            "UTCTime years 49 and 50 are 2049 and 1950"
        );
    }

    #[test]
    fn anything_else_is_none_never_a_panic() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(
            validity(&certificate(
                (UTC_TIME, "2001010000Z"),
                (UTC_TIME, "200101000000Z")
            )),
            None
        );
        assert_eq!(
            validity(&certificate(
                (UTC_TIME, "201301000000Z"),
                (UTC_TIME, "200101000000Z")
            )),
            None,
            "month 13"
        );
        let whole = certificate((UTC_TIME, "200101000000Z"), (UTC_TIME, "200101000000Z"));
        for cut in 0..whole.len() {
            let _ = validity(&whole[..cut]);
        }
    }
}
