//! The RLS-vs-RLQS section of the report (`rlqs.rs` measures it): how it was measured, one
//! row per rate and path, and the RLQS warm-ups; or, loudly, why it was not measured.

use std::fmt::Write as _;

use crate::rlqs::{CONNECTIONS, KINDS, Kind, Run, Runs, Settings, measure, quota_of};
use crate::{Redis, load_average, median_and_spread};

/// The section's Markdown, measured now.
pub fn section(redis: &Redis, settings: &Settings) -> String {
    let load_before = load_average();
    match measure(redis, settings) {
        Ok(runs) => report(settings, &runs, &load_before, &load_average()),
        Err(reason) => {
            format!("\n**RLS vs RLQS through a real Envoy**: **not measured**: {reason}\n")
        }
    }
}

/// `median (±half the spread %)` of `values`, with `decimals` decimals.
fn median_spread(values: Vec<f64>, decimals: usize) -> String {
    let (median, spread) = median_and_spread(values);
    format!("{median:.decimals$} (±{:.0} %)", spread * 50.0)
}

fn median(values: Vec<f64>) -> f64 {
    median_and_spread(values).0
}

/// A path's median latencies at one rate, µs: all answers, then the `200`s only.
#[derive(Clone, Copy)]
struct Latencies {
    p50: f64,
    p99: f64,
    admitted_p50: f64,
    admitted_p99: f64,
}

impl Latencies {
    fn of(runs: &[Run]) -> Self {
        let median_of = |field: fn(&Run) -> f64| median(runs.iter().map(field).collect());
        Self {
            p50: median_of(|run| run.p50_us),
            p99: median_of(|run| run.p99_us),
            admitted_p50: median_of(|run| run.admitted_p50_us),
            admitted_p99: median_of(|run| run.admitted_p99_us),
        }
    }
}

fn report(settings: &Settings, runs: &Runs, load_before: &str, load_after: &str) -> String {
    let mut text = String::new();
    let rates: Vec<String> = settings
        .rates
        .iter()
        .map(|rate| format!("{rate:.0}/s (quota {}/s)", quota_of(*rate)))
        .collect();
    writeln!(
        text,
        "\n**RLS vs RLQS through a real Envoy** (1.40.0, `--concurrency 1`, one Envoy, one \
         backend answering `200`; load average {load_before} before this section, \
         {load_after} after it). Three listeners are offered the same rate, open loop \
         (request `i` due at `i / rate` s, sent on the first free of {CONNECTIONS} keep-alive \
         HTTP/1.1 connections whatever is pending; latency from the due instant to the \
         answer), {} s a run, {} repeats, the paths alternating: (a) no rate-limit filter; \
         (b) `envoy.filters.http.ratelimit` (RLS v3, the request's `x-tenant` as the \
         descriptor `tenant`) to the service; (c) `envoy.filters.http.rate_limit_quota` \
         (RLQS, the filter of `examples/envoy-rlqs/envoy.yaml`: the bucket `{{tenant: \
         <x-tenant>}}`, both fallbacks `DENY_ALL`) to the same binary started with `--rlqs` \
         (assignments of 2 s; Envoy 1.40 reports every 5 s). Both limited paths have the \
         same YAML limit, one `tenant` descriptor at a third of the offered rate a second \
         (fixed window), in the same Redis, so demand is 3× the quota. Rates: {}. Each run \
         has a tenant of its own (a fresh Redis key, a new RLQS bucket), warmed up until \
         Envoy answers it `200` (not counted). Each figure is the median over the repeats \
         (± half the spread, max − min, where given); `200 / 429` are summed over the \
         repeats. Admitted / quota: the `200`s of each whole 1 s window of a run \
         (epoch-aligned, as the limit's windows; a request placed at the midpoint of its \
         sending and its answer) over the quota of those windows, the median over the \
         repeats (lowest-highest repeat); windows: the fewest and the most admitted in any \
         one window of any repeat. A `429` never reaches the backend, so the latency of all \
         answers falls as more are denied; the `200`s' latency is each admitted request \
         through the filter and the backend. Added: this path's median minus path (a)'s at \
         the same rate. CPU per request: the on-CPU time of all the process's threads \
         (service: the RLS or the RLQS process; Envoy: its whole process) per answered \
         request; Redis: its main thread, and `INFO commandstats` deltas of the `RL.*` \
         commands and of the RLQS demand exchange's `HSET`, `PEXPIREAT` and `HGETALL` (the \
         service's deny cache answers a denied tenant from memory until its window ends, so \
         RLS makes about one Redis call per admitted request). Path (a)'s \
         Redis figures are what Redis does beside it: its own timers, and the renewals the \
         RLQS service still sends for the last RLQS run's bucket until it abandons it, 15 s \
         after its last request.\n",
        settings.seconds,
        settings.repeats,
        rates.join(", "),
    )
    .unwrap();
    writeln!(
        text,
        "| offered/s | quota/s | path | achieved/s | 200 / 429 | admitted / quota | windows \
         (admitted) | p50 µs | p99 µs | added p50 / p99 µs | 200s: p50 / p99 µs (added) | \
         service CPU µs/request | Redis CPU µs/request | Redis commands/request | Envoy CPU \
         µs/request |"
    )
    .unwrap();
    writeln!(
        text,
        "|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    )
    .unwrap();
    let mut warm_ups = Vec::new();
    for (rate, by_kind) in settings.rates.iter().zip(runs) {
        let plain = Latencies::of(&by_kind[0]);
        for (kind, runs) in KINDS.iter().zip(by_kind) {
            if *kind == Kind::Rlqs {
                warm_ups.extend(runs.iter().map(|run| (run.warm_up, run.warm_up_refused)));
            }
            text.push_str(&row(*rate, *kind, runs, plain));
        }
    }
    let took = warm_ups.iter().map(|(took, _)| took.as_secs_f64() * 1e3);
    let refused = warm_ups.iter().map(|(_, refused)| *refused);
    writeln!(
        text,
        "\nThe RLQS warm-ups (a new bucket each run, one request every 5 ms until a `200`) \
         took {:.0}-{:.0} ms, {}-{} requests denied before the first assignment.",
        took.clone().fold(f64::MAX, f64::min),
        took.fold(0.0, f64::max),
        refused.clone().min().unwrap_or(0),
        refused.max().unwrap_or(0),
    )
    .unwrap();
    text
}

/// One table row: the repeats of `kind` at `rate`; `plain` is path (a)'s at that rate.
fn row(rate: f64, kind: Kind, runs: &[Run], plain: Latencies) -> String {
    let quota = quota_of(rate);
    let own = Latencies::of(runs);
    let sum = |field: fn(&Run) -> usize| runs.iter().map(field).sum::<usize>();
    let (other, failed) = (sum(|run| run.other), sum(|run| run.failed));
    let lost = if other + failed > 0 {
        format!(" ({other} other statuses, {failed} failed)")
    } else {
        String::new()
    };
    let per_request =
        |ns: fn(&Run) -> u64| median(runs.iter().map(|run| run.per_request_us(ns(run))).collect());
    let limited = kind != Kind::Plain;
    let admitted_latency = format!("{:.0} / {:.0}", own.admitted_p50, own.admitted_p99);
    let (quota_text, accuracy, windows, added, admitted_latency, service) = if limited {
        let accuracies: Vec<f64> = runs.iter().map(|run| run.accuracy(quota)).collect();
        let lowest = accuracies.iter().copied().fold(f64::MAX, f64::min);
        let highest = accuracies.iter().copied().fold(f64::MIN, f64::max);
        let all = runs.iter().flat_map(|run| run.windows.iter().copied());
        let (fewest, most) = (all.clone().min().unwrap_or(0), all.max().unwrap_or(0));
        (
            quota.to_string(),
            format!("{:.0} % ({lowest:.0}-{highest:.0} %)", median(accuracies)),
            format!("{fewest}-{most} of {quota}"),
            format!("{:.0} / {:.0}", own.p50 - plain.p50, own.p99 - plain.p99),
            format!(
                "{admitted_latency} ({:.0} / {:.0})",
                own.admitted_p50 - plain.admitted_p50,
                own.admitted_p99 - plain.admitted_p99
            ),
            median_spread(
                runs.iter()
                    .map(|run| run.per_request_us(run.cost.service_cpu_ns))
                    .collect(),
                1,
            ),
        )
    } else {
        let dash = || "–".to_string();
        (dash(), dash(), dash(), dash(), admitted_latency, dash())
    };
    format!(
        "| {rate:.0} | {quota_text} | {} | {:.0}{lost} | {} / {} | {accuracy} | {windows} | {} | \
         {} | {added} | {admitted_latency} | {service} | {:.2} | {:.3} | {:.1} |\n",
        kind.label(),
        median(runs.iter().map(|run| run.achieved).collect()),
        sum(|run| run.admitted),
        sum(|run| run.denied),
        median_spread(runs.iter().map(|run| run.p50_us).collect(), 0),
        median_spread(runs.iter().map(|run| run.p99_us).collect(), 0),
        per_request(|run| run.cost.redis_cpu_ns),
        median(
            runs.iter()
                .map(|run| run.cost.redis_commands as f64 / run.answered().max(1) as f64)
                .collect()
        ),
        per_request(|run| run.envoy_cpu_ns),
    )
}
