//! The pre-pay on real processes: the schedule where it matters, built on purpose. The long
//! run's over-demand keeps every pool empty, so there the carryover mode never shows what
//! the pre-pay is for; this one does, deterministically:
//!
//! 1. region 0's agent leases `k = 8` units (one refresh), which it leaves unspent;
//! 2. the pool refills them (450 ms at 20/s) while that lease still lives (`T = 900 ms`);
//! 3. region 1's agent leases the whole pool (`k = 40`);
//! 4. every region then bursts: its full floor, then its lease.
//!
//! The regions admit their floors (40), region 0's lease (8) and region 1's (the pool):
//! with the carryover pool of 40 that is 88 against a global burst of 80, 8 over, within
//! the carryover's `min(2·Σk, ⌈r_p·T⌉) = 18`; with the pre-paid pool of 22, 70: none
//! over. Token bucket and GCRA, each both modes; planted: the pre-paid limits' pools sized
//! without the pre-pay, which must over-admit.

use std::time::Duration;

use redis::Value;
use redis_ratelimit_client::regions::{self, AgentConfig, HotLimit, LogLeases, ServerForm};
use redis_ratelimit_testkit::server::Server;

use super::limits::{GlobalLimit, Mode, limits};
use super::{SPLIT, check};
use crate::checker::bounds::Bound;
use crate::checker::interval::Call;
use crate::record::now_us;

/// Calls of each limit in one pipeline of a burst.
const CALLS_PER_TRIP: usize = 16;

/// Region 0's lease, left unspent; region 1's, the whole pool.
pub const LEASES: [u64; 2] = [8, 40];

/// One limit's burst.
#[derive(Clone, Debug)]
pub struct Burst {
    pub name: &'static str,
    pub mode: Mode,
    pub admitted: u64,
    /// The most units over the global limit in any interval.
    pub over: u64,
    /// What the mode allows.
    pub allowed: u64,
}

impl Burst {
    pub fn kept(&self) -> bool {
        self.over <= self.allowed
    }
}

/// Runs the schedule on a home (primary and replica, for `WAIT`) and three regions;
/// `without_prepay` plants the bug.
pub fn run(without_prepay: bool) -> Vec<Burst> {
    let chosen: Vec<GlobalLimit> = limits()
        .into_iter()
        .filter(|limit| matches!(limit.mode, Mode::PrePaid | Mode::Carryover))
        .collect();
    let home = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start(&[]);
    replica.replicate_from(&home);
    let regions_servers: Vec<Server> = (0..3).map(|_| Server::start(&[])).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let config = AgentConfig {
        period: SPLIT.period,
        margin: SPLIT.margin,
        drift_ppm: 1_000,
        wait_replicas: 1,
        wait_timeout: Duration::from_secs(5),
        home: ServerForm::Module,
        region: ServerForm::Module,
        // The harness widens its log pools itself (`Mode::LogWidened`) and measures the
        // plain `W` pool beside it (`Mode::LogAtGrant`): the agent asks them as given.
        log_leases: LogLeases::AsGiven,
    };
    let hot = |region: usize| -> Vec<HotLimit> {
        chosen
            .iter()
            .map(|limit| {
                let pool = if without_prepay {
                    GlobalLimit {
                        mode: Mode::Carryover,
                        ..limit.clone()
                    }
                    .pool_algorithm(&SPLIT)
                } else {
                    limit.pool_algorithm(&SPLIT)
                };
                HotLimit {
                    pool_key: format!("pool:{}", limit.name),
                    pool,
                    lease_key: format!("{{{}}}lease", limit.name),
                    lease_units: LEASES[region],
                    slot_holder: format!("r{region}"),
                }
            })
            .collect()
    };
    let admitted: Vec<(usize, Call)> = runtime.block_on(async {
        let mut home_con = home.async_conn_untimed().await;
        // The replica has synced: a WAIT answers at once (the leases count from their
        // request, so a slow first WAIT would end region 0's before the burst).
        for _ in 0..100 {
            let acknowledged: i64 = redis::pipe()
                .cmd("SET")
                .arg("warm")
                .arg(1)
                .ignore()
                .cmd("WAIT")
                .arg(1)
                .arg(100)
                .query_async::<(i64,)>(&mut home_con)
                .await
                .map_or(0, |(acknowledged,)| acknowledged);
            if acknowledged == 1 {
                break;
            }
        }
        let mut cons = Vec::new();
        for server in &regions_servers {
            cons.push(server.async_conn_untimed().await);
        }
        let first = regions::refresh(&mut home_con, &mut cons[0], &hot(0), &config).await;
        assert!(first.is_ok(), "region 0's lease: {first:?}");
        tokio::time::sleep(Duration::from_millis(450)).await;
        let second = regions::refresh(&mut home_con, &mut cons[1], &hot(1), &config).await;
        assert!(second.is_ok(), "region 1's lease: {second:?}");
        let [a, b, c] = &mut cons[..] else {
            panic!("three regions")
        };
        let (mut admitted, mut second, mut third) = tokio::join!(
            spend(a, 0, &chosen),
            spend(b, 1, &chosen),
            spend(c, 2, &chosen)
        );
        admitted.append(&mut second);
        admitted.append(&mut third);
        admitted
    });
    chosen
        .iter()
        .enumerate()
        .map(|(index, limit)| {
            let calls: Vec<Call> = admitted
                .iter()
                .filter(|(limit_index, _)| *limit_index == index)
                .map(|(_, call)| *call)
                .collect();
            let over = Bound::of(limit.shape)
                .checks()
                .into_iter()
                .filter_map(|bound| check::worst(&calls, bound))
                .map(|interval| interval.excess())
                .max()
                .unwrap_or(0);
            Burst {
                name: limit.name,
                mode: limit.mode,
                admitted: calls.len() as u64,
                over,
                allowed: limit.allowed_excess(&SPLIT, &LEASES).unwrap_or(0),
            }
        })
        .collect()
}

/// One region's burst: calls every limit until none admits; the admissions.
async fn spend(
    con: &mut redis::aio::MultiplexedConnection,
    region: usize,
    chosen: &[GlobalLimit],
) -> Vec<(usize, Call)> {
    let mut admitted = Vec::new();
    for _ in 0..20 {
        // 16 calls of each limit a round trip: the burst takes a few round trips, so the
        // refill over it (40/s) hides little of what it over-admits, even on a slow host.
        let mut pipe = redis::pipe();
        for limit in chosen {
            for _ in 0..CALLS_PER_TRIP {
                pipe.cmd("RL.REGIONAL")
                    .arg(format!("{{{}}}floor", limit.name))
                    .arg(format!("{{{}}}lease", limit.name))
                    .arg(limit.floor_words(&SPLIT, region));
            }
        }
        let send_us = now_us();
        let replies: Vec<Value> = pipe.query_async(con).await.expect("RL.REGIONAL");
        let recv_us = now_us();
        let mut any = false;
        for (index, reply) in replies.iter().enumerate() {
            if let Value::Array(fields) = reply
                && matches!(fields.first(), Some(Value::Int(1)))
            {
                any = true;
                admitted.push((
                    index / CALLS_PER_TRIP,
                    Call {
                        from_us: send_us,
                        to_us: recv_us,
                        units: 1,
                    },
                ));
            }
        }
        if !any {
            break;
        }
    }
    admitted
}
