//! The bound of docs/rlqs.md checked from what happened, not from the service's own word
//! about it: the tokens charged and refunded are read from the services' journals (the
//! `rlqs: charged` and `rlqs: refunded` lines of `--log-level debug`, each written when the
//! store answered, a charge before its assignment is sent), so a killed service's charges
//! are all counted; the requests admitted are what the test's clients saw through Envoy.
//!
//! Per whole 1 s window `[s, s + 1)` (epoch-aligned, as the limit's windows in Redis): the
//! requests admitted in it are at most the quota plus the tokens outstanding at `s`
//! (charged, minus refunded, minus admitted before `s`); over a span of `k` windows, at most
//! `k` quotas plus the tokens outstanding at its start. Each side is counted so that timing
//! can only loosen the check: a request answered at or after `s` and sent before `s + 1`
//! counts in the window (and not as spent before it); a charge logged before `s + 20 ms`
//! counts as outstanding at `s` (the log line follows the store's answer by microseconds);
//! a refund only once logged before `s`.

use super::load::Sent;

/// A charge written after its store answer by less than this.
const LOGGED_WITHIN_SECONDS: f64 = 0.020;

/// One journal line: when, charged (+) or refunded (−) tokens.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub at: f64,
    pub tokens: i64,
}

/// The charges and refunds of the limit whose key contains `key_part`, from every log.
pub fn entries(logs: &[String], key_part: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = logs
        .iter()
        .flat_map(|log| log.lines())
        .map(without_colours)
        .filter(|line| line.contains(key_part))
        .filter_map(|line| {
            let sign = if line.contains("rlqs: charged") {
                1
            } else if line.contains("rlqs: refunded") {
                -1
            } else {
                return None;
            };
            let at = unix_seconds(line.split_whitespace().next()?)?;
            let tokens: i64 = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("tokens="))?
                .parse()
                .ok()?;
            Some(Entry {
                at,
                tokens: sign * tokens,
            })
        })
        .collect();
    entries.sort_by(|a, b| a.at.total_cmp(&b.at));
    entries
}

/// A log line without the terminal colour sequences tracing writes.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters, then one letter.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `2026-12-07T11:09:59.123456Z` as Unix seconds.
fn unix_seconds(text: &str) -> Option<f64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let mut time = time.split(':');
    let hours: f64 = time.next()?.parse().ok()?;
    let minutes: f64 = time.next()?.parse().ok()?;
    let seconds: f64 = time.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days as f64 * 86_400.0 + hours * 3_600.0 + minutes * 60.0 + seconds)
}

/// One whole window: its start, the requests admitted in it, and its bound (the quota
/// plus the tokens outstanding at its start).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: f64,
    pub admitted: u64,
    pub bound: i64,
}

/// Every whole window from `from` to `to` (Unix seconds) of a limit of `quota` a window,
/// from the requests `sent` for it and its journal.
pub fn windows(sent: &[&Sent], journal: &[Entry], quota: u64, from: f64, to: f64) -> Vec<Window> {
    let admitted: Vec<&&Sent> = sent.iter().filter(|request| request.admitted()).collect();
    let mut out = Vec::new();
    let mut start = from.ceil();
    while start + 1.0 <= to {
        let in_window = admitted
            .iter()
            .filter(|request| request.answered >= start && request.sent < start + 1.0)
            .count() as u64;
        let spent_before = admitted
            .iter()
            .filter(|request| request.answered < start)
            .count() as i64;
        let net: i64 = journal
            .iter()
            .filter(|entry| {
                if entry.tokens > 0 {
                    entry.at < start + LOGGED_WITHIN_SECONDS
                } else {
                    entry.at < start
                }
            })
            .map(|entry| entry.tokens)
            .sum();
        out.push(Window {
            start,
            admitted: in_window,
            bound: quota as i64 + net - spent_before,
        });
        start += 1.0;
    }
    out
}

/// Every span of whole windows admits at most its bound: the first window's (the quota
/// plus the tokens outstanding at its start) plus a quota for each further window.
pub fn assert_every_span_within_its_bound(windows: &[Window], quota: u64) {
    assert!(windows.len() >= 5, "{windows:?}");
    let (slack, first, count) = tightest_span(windows, quota);
    assert!(
        slack >= 0,
        "{count} windows from {first}: admitted {} over the bound: {}",
        -slack,
        show(windows)
    );
}

/// The span of windows closest to its bound: the bound minus what it admitted (negative:
/// over), its first window and its length.
pub fn tightest_span(windows: &[Window], quota: u64) -> (i64, usize, usize) {
    let mut tightest = (i64::MAX, 0, 0);
    for first in 0..windows.len() {
        let mut admitted = 0;
        for (offset, window) in windows[first..].iter().enumerate() {
            admitted += window.admitted as i64;
            let bound = windows[first].bound + offset as i64 * quota as i64;
            if bound - admitted < tightest.0 {
                tightest = (bound - admitted, first, offset + 1);
            }
        }
    }
    tightest
}

/// The windows as `(admitted, bound)` pairs.
pub fn show(windows: &[Window]) -> String {
    let pairs: Vec<String> = windows
        .iter()
        .map(|window| format!("({}, {})", window.admitted, window.bound))
        .collect();
    pairs.join(" ")
}

/// The share of the quota admitted over `windows`.
pub fn utilisation(windows: &[Window], quota: u64) -> f64 {
    let admitted: u64 = windows.iter().map(|window| window.admitted).sum();
    admitted as f64 / (windows.len() as u64 * quota).max(1) as f64
}

#[test]
fn journal_lines_are_read_with_or_without_colours() {
    let logs = vec![
        "\u{1b}[2m2026-12-07T11:09:59.500000Z\u{1b}[0m \u{1b}[34mDEBUG\u{1b}[0m rlqs: charged \u{1b}[3mstream\u{1b}[0m\u{1b}[2m=\u{1b}[0m0 \u{1b}[3mkey\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"edge:tenant=hot|s\" \u{1b}[3mtokens\u{1b}[0m\u{1b}[2m=\u{1b}[0m34\n\
         2026-12-07T11:10:00.000000Z DEBUG rlqs: refunded key=\"edge:tenant=hot|s\" tokens=4\n\
         2026-12-07T11:10:00.000000Z DEBUG rlqs: charged stream=1 key=\"edge:tenant=cold-0|s\" tokens=9"
            .to_string(),
    ];
    let read = entries(&logs, ":tenant=hot|");
    assert_eq!(read.len(), 2);
    assert_eq!((read[0].tokens, read[1].tokens), (34, -4));
    // 2026-12-07T11:10:00Z is 1796641800 (date -d @1796641800 -u).
    assert_eq!(read[1].at, 1_796_641_800.0);
    assert_eq!(read[0].at, 1_796_641_799.5);
}
