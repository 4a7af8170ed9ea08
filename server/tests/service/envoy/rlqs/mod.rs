//! Envoy's Rate Limit Quota Service through real Envoys 1.40.0 running
//! `examples/envoy-rlqs/envoy.yaml` as it is (only its addresses changed) in front of the
//! service with `--rlqs` and `examples/envoy-rlqs/config/edge.yaml` (each tenant 100
//! requests a second, the `x-tenant` header its bucket; both fallbacks deny). The bound of
//! docs/rlqs.md is checked per window and over every span of windows from what the clients
//! saw and the services' journals ([`journal`]); figures are printed.
//!
//! - one Envoy: a new bucket's first request is denied (`no_assignment_behavior: DENY_ALL`),
//!   then the assignment admits; a request without the header is `{tenant: anonymous}`, of
//!   limit 0 (`DENY_ALL`); one tenant at 3x its quota: within the bound, at least half the
//!   quota in every window, leases refunded from Envoy's reports, 429s never reach the
//!   backend;
//! - three Envoys (issue #42): one hot tenant offered 3x its quota across them and a cold
//!   tenant on each; the fleet within the bound, at least 80 % of the quota used, each Envoy
//!   a fair part of it, the cold tenants served, at most 0.05 stream messages and 0.05 Redis
//!   commands per request; then the service is killed (SIGKILL): every request is denied once
//!   the assignments ran out (`expired_assignment_behavior: DENY_ALL`); started again on its
//!   port, the Envoys stream again and admit, within the bound across both processes;
//! - two services behind each Envoy's `ratelimit` cluster, sharing Redis: the same bound and
//!   use of the quota fleet-wide.

mod journal;
mod load;
mod stack;

use std::collections::BTreeMap;
use std::time::Duration;

use journal::Window;
use load::{Load, Offer, Sent, now_seconds};
use stack::{QUOTA_PER_SECOND, Stack};

const HOT: &str = "hot";
const COLD: [&str; 3] = ["cold-0", "cold-1", "cold-2"];
/// Each Envoy's share of the hot tenant's load: 3 Envoys, 3x the quota.
const HOT_PER_ENVOY: f64 = 100.0;
const COLD_PER_SECOND: f64 = 5.0;

/// The part of a tenant's Redis key (and journal lines) naming it.
fn key_part(tenant: &str) -> String {
    format!(":tenant={tenant}|")
}

/// The windows of `tenant` from `from` to `to`.
fn windows_of(stack: &Stack, sent: &[Sent], tenant: &str, from: f64, to: f64) -> Vec<Window> {
    let journal = journal::entries(&stack.logs(), &key_part(tenant));
    let of_tenant: Vec<&Sent> = sent
        .iter()
        .filter(|request| request.tenant == tenant)
        .collect();
    journal::windows(&of_tenant, &journal, QUOTA_PER_SECOND, from, to)
}

/// Tokens refunded to `tenant`'s limit, from the journals.
fn refunded(stack: &Stack, tenant: &str) -> i64 {
    journal::entries(&stack.logs(), &key_part(tenant))
        .iter()
        .filter(|entry| entry.tokens < 0)
        .map(|entry| -entry.tokens)
        .sum()
}

/// Windows wholly inside `[from, to)`.
fn inside(windows: &[Window], from: f64, to: f64) -> Vec<Window> {
    windows
        .iter()
        .filter(|window| window.start >= from && window.start + 1.0 <= to)
        .copied()
        .collect()
}

fn admitted(sent: &[Sent]) -> usize {
    sent.iter().filter(|request| request.admitted()).count()
}

#[test]
fn one_envoy_admits_within_the_quota_plus_the_outstanding_tokens() {
    let stack = Stack::start(1, 1);
    let envoy = &stack.envoys[0];
    // No assignment yet: denied; then the assignment admits.
    let first = envoy.status_of("/", &[("x-tenant", "warm")]);
    assert_eq!(first, 429, "no_assignment_behavior denies");
    let mut sent = stack.await_assignments("warm", &[0]);
    // Without the header: {tenant: anonymous}, of limit 0.
    for _ in 0..5 {
        assert_eq!(envoy.status_of("/", &[]), 429, "anonymous is DENY_ALL");
    }
    sent.extend(stack.await_assignments(HOT, &[0]));
    let started = now_seconds();
    let load = Load::start(
        &stack.addresses(),
        &[Offer {
            envoy: 0,
            tenant: HOT,
            per_second: 3.0 * QUOTA_PER_SECOND as f64,
        }],
    );
    // Long enough for settlement: Envoy 1.40 reports every 5 s; a replaced lease settles
    // at the second report after it.
    std::thread::sleep(Duration::from_secs(12));
    sent.extend(load.stop());
    let ended = sent.last().unwrap().answered;
    let windows = windows_of(&stack, &sent, HOT, started, ended);
    let hot: Vec<&Sent> = sent
        .iter()
        .filter(|request| request.tenant == HOT)
        .collect();
    let denied = hot.iter().filter(|request| request.status == 429).count();
    println!(
        "RLQS, 1 Envoy: {HOT} offered {:.0}/s, quota {QUOTA_PER_SECOND}/s: (admitted, quota + \
         outstanding) per 1 s window: {}; the tightest span of windows {} under its bound; \
         utilisation {:.0} %; refunded {} tokens",
        hot.len() as f64 / (ended - started),
        journal::show(&windows),
        journal::tightest_span(&windows, QUOTA_PER_SECOND).0,
        journal::utilisation(&windows, QUOTA_PER_SECOND) * 100.0,
        refunded(&stack, HOT)
    );
    journal::assert_every_span_within_its_bound(&windows, QUOTA_PER_SECOND);
    for window in &windows {
        assert!(
            window.admitted * 2 >= QUOTA_PER_SECOND,
            "{}",
            journal::show(&windows)
        );
    }
    assert!(journal::utilisation(&windows, QUOTA_PER_SECOND) >= 0.8);
    assert!(denied * 10 >= hot.len() * 4, "{denied} of {}", hot.len());
    assert!(
        sent.iter()
            .all(|request| matches!(request.status, 200 | 429))
    );
    // A 429 never reaches the backend.
    assert_eq!(stack.backend.served(), admitted(&sent));
}

/// The load of the fleet tests: the hot tenant on every Envoy, a cold tenant on each.
fn fleet_offers(envoys: usize) -> Vec<Offer> {
    let hot = (0..envoys).map(|envoy| Offer {
        envoy,
        tenant: HOT,
        per_second: HOT_PER_ENVOY,
    });
    let cold = (0..envoys).map(|envoy| Offer {
        envoy,
        tenant: COLD[envoy % COLD.len()],
        per_second: COLD_PER_SECOND,
    });
    hot.chain(cold).collect()
}

/// Awaits every fleet tenant's first assignments: the requests admitted.
fn await_fleet(stack: &Stack) -> Vec<Sent> {
    let all: Vec<usize> = (0..stack.envoys.len()).collect();
    let mut sent = stack.await_assignments(HOT, &all);
    for envoy in all {
        sent.extend(stack.await_assignments(COLD[envoy % COLD.len()], &[envoy]));
    }
    sent
}

/// The hot tenant's admitted requests per Envoy within `[from, to)`.
fn per_envoy(sent: &[Sent], envoys: usize, from: f64, to: f64) -> Vec<usize> {
    (0..envoys)
        .map(|envoy| {
            sent.iter()
                .filter(|request| {
                    request.envoy == envoy
                        && request.tenant == HOT
                        && request.admitted()
                        && request.sent >= from
                        && request.sent < to
                })
                .count()
        })
        .collect()
}

/// The fleet's steady-state checks over `[from, to)`: at least 80 % of the quota used, each
/// Envoy at least half of an equal part of it, every cold request admitted but a few.
fn assert_fleet_served(sent: &[Sent], windows: &[Window], envoys: usize, from: f64, to: f64) {
    let steady = inside(windows, from, to);
    let utilisation = journal::utilisation(&steady, QUOTA_PER_SECOND);
    assert!(
        utilisation >= 0.8,
        "utilisation {utilisation:.2}: {}",
        journal::show(&steady)
    );
    let parts = per_envoy(sent, envoys, from, to);
    let total: usize = parts.iter().sum();
    for part in &parts {
        assert!(part * envoys * 2 >= total, "per Envoy: {parts:?}");
    }
    let cold: Vec<&Sent> = sent
        .iter()
        .filter(|request| request.tenant != HOT && request.sent >= from && request.sent < to)
        .collect();
    let cold_admitted = cold.iter().filter(|request| request.admitted()).count();
    assert!(
        cold_admitted * 100 >= cold.len() * 95,
        "cold tenants: {cold_admitted} of {} admitted",
        cold.len()
    );
}

/// Issue #42: three Envoys share the hot tenant's quota through one service, which is then
/// killed and started again.
#[test]
fn three_envoys_share_a_quota_within_the_bound_and_deny_once_the_service_is_killed() {
    const ENVOYS: usize = 3;
    let mut stack = Stack::start(1, ENVOYS);
    let mut sent = await_fleet(&stack);
    let started = now_seconds();
    let (commands_before, messages_before) = (stack.redis_commands(), stack.stream_messages());
    let load = Load::start(&stack.addresses(), &fleet_offers(ENVOYS));
    // The schedule: 20 s of load, the service killed for 5 s, then running again.
    std::thread::sleep(Duration::from_secs(20));
    let commands: BTreeMap<String, u64> = stack
        .redis_commands()
        .into_iter()
        .map(|(name, calls)| {
            let before = commands_before.get(&name).copied().unwrap_or(0);
            (name, calls - before)
        })
        .filter(|(_, calls)| *calls > 0)
        .collect();
    let calls: u64 = commands.values().sum();
    let messages = stack.stream_messages() - messages_before;
    let killed = now_seconds();
    stack.services[0].kill();
    std::thread::sleep(Duration::from_secs(5));
    let restarted = now_seconds();
    stack.services[0].start_again();
    // The Envoys stream again (Envoy 1.40 reopens its stream at its next report) and
    // admit: awaited through each, counted with the load.
    let all: Vec<usize> = (0..ENVOYS).collect();
    sent.extend(stack.await_assignments(HOT, &all));
    let resumed = now_seconds();
    std::thread::sleep(Duration::from_secs(10));
    sent.extend(load.stop());
    sent.sort_by(|a, b| a.sent.total_cmp(&b.sent));
    let ended = sent.last().unwrap().answered;

    let windows = windows_of(&stack, &sent, HOT, started, ended);
    let in_phase = |from: f64, to: f64| {
        sent.iter()
            .filter(|request| request.sent >= from && request.sent < to)
            .count()
    };
    let requests = in_phase(started, killed);
    let admitted_after_kill: Vec<&Sent> = sent
        .iter()
        .filter(|request| request.admitted() && request.sent >= killed && request.sent < restarted)
        .collect();
    let last_admitted_after_kill = admitted_after_kill
        .iter()
        .map(|request| request.answered - killed)
        .fold(0.0, f64::max);
    println!(
        "RLQS, {ENVOYS} Envoys, one service: {HOT} at {HOT_PER_ENVOY:.0}/s per Envoy and a cold \
         tenant at {COLD_PER_SECOND:.0}/s on each, quota {QUOTA_PER_SECOND}/s; before the kill: \
         {requests} requests, {messages} stream messages ({:.4}/request), {calls} Redis \
         commands ({:.4}/request: {commands:?}), utilisation {:.0} %, per Envoy {:?}; killed at +{:.1} s: \
         {} admitted after it, the last +{last_admitted_after_kill:.2} s after; started again \
         at +{:.1} s, admitting through every Envoy {:.1} s later; after: utilisation {:.0} %, \
         per Envoy {:?}; (admitted, quota + outstanding) per 1 s window: {}; the tightest span of windows {} under its bound",
        messages as f64 / requests as f64,
        calls as f64 / requests as f64,
        journal::utilisation(&inside(&windows, started, killed), QUOTA_PER_SECOND) * 100.0,
        per_envoy(&sent, ENVOYS, started, killed),
        killed - started,
        admitted_after_kill.len(),
        restarted - started,
        resumed - restarted,
        journal::utilisation(&inside(&windows, resumed + 1.0, ended), QUOTA_PER_SECOND) * 100.0,
        per_envoy(&sent, ENVOYS, resumed + 1.0, ended),
        journal::show(&windows),
        journal::tightest_span(&windows, QUOTA_PER_SECOND).0,
    );
    journal::assert_every_span_within_its_bound(&windows, QUOTA_PER_SECOND);
    assert_fleet_served(&sent, &windows, ENVOYS, started, killed);
    assert_fleet_served(&sent, &windows, ENVOYS, resumed + 1.0, ended);
    assert!(
        messages as f64 <= 0.05 * requests as f64,
        "{messages} messages"
    );
    assert!(
        calls as f64 <= 0.05 * requests as f64,
        "{calls} Redis commands"
    );
    assert!(
        commands
            .get("rl.refund")
            .is_some_and(|refunds| *refunds > 0),
        "leases settled from Envoy's reports: {commands:?}"
    );
    // The assignments live 2 s (whole seconds, from when Envoy applied them): from 3 s after
    // the kill to the restart, everything is denied.
    let denied_while_down = sent
        .iter()
        .filter(|request| request.sent >= killed + 3.0 && request.sent < restarted)
        .all(|request| request.status == 429);
    assert!(
        denied_while_down,
        "admitted with the service down and the assignments expired"
    );
    assert!(
        sent.iter()
            .all(|request| matches!(request.status, 200 | 429))
    );
    assert_eq!(stack.backend.served(), admitted(&sent));
}

/// Issue #42: two services behind each Envoy's `ratelimit` cluster (Envoys 0 and 2 stream to
/// the first, Envoy 1 to the second), sharing the quota in Redis.
#[test]
fn three_envoys_on_two_services_share_a_quota_within_the_bound() {
    const ENVOYS: usize = 3;
    let stack = Stack::start(2, ENVOYS);
    let mut sent = await_fleet(&stack);
    let started = now_seconds();
    let load = Load::start(&stack.addresses(), &fleet_offers(ENVOYS));
    // Shares converge within two of Envoy's reports (5 s apart in Envoy 1.40) and a demand
    // exchange: 10 s, then 10 s of the fleet sharing fairly.
    std::thread::sleep(Duration::from_secs(20));
    sent.extend(load.stop());
    sent.sort_by(|a, b| a.sent.total_cmp(&b.sent));
    let ended = sent.last().unwrap().answered;
    let windows = windows_of(&stack, &sent, HOT, started, ended);
    let charged_by: Vec<i64> = stack
        .services
        .iter()
        .map(|service| {
            journal::entries(&service.logs(), &key_part(HOT))
                .iter()
                .filter(|entry| entry.tokens > 0)
                .map(|entry| entry.tokens)
                .sum()
        })
        .collect();
    println!(
        "RLQS, {ENVOYS} Envoys on 2 services: utilisation {:.0} %, per Envoy {:?} (after \
         10 s: {:?}), tokens charged by each service {charged_by:?}; (admitted, quota + outstanding) per 1 s window: {}; the tightest span of windows {} under its bound",
        journal::utilisation(&windows, QUOTA_PER_SECOND) * 100.0,
        per_envoy(&sent, ENVOYS, started, ended),
        per_envoy(&sent, ENVOYS, started + 10.0, ended),
        journal::show(&windows),
        journal::tightest_span(&windows, QUOTA_PER_SECOND).0,
    );
    journal::assert_every_span_within_its_bound(&windows, QUOTA_PER_SECOND);
    assert!(
        charged_by.iter().all(|tokens| *tokens > 0),
        "both services lease"
    );
    assert!(journal::utilisation(&windows, QUOTA_PER_SECOND) >= 0.8);
    assert_fleet_served(&sent, &windows, ENVOYS, started + 10.0, ended);
    assert_eq!(stack.backend.served(), admitted(&sent));
}
