//! Load offered through Envoys: one thread per (Envoy, tenant), each sending GETs with the
//! tenant's `x-tenant` header at a steady rate on one keep-alive HTTP/1.1 connection
//! (testkit's, a new one when Envoy closes it), recording when each request was sent and
//! answered and its status, until stopped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_ratelimit_testkit::http::HttpConnection;

/// Unix seconds now (the clock the services' logs and Redis's windows use).
pub fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One tenant's requests through one Envoy.
#[derive(Clone, Copy, Debug)]
pub struct Offer {
    pub envoy: usize,
    pub tenant: &'static str,
    pub per_second: f64,
}

/// One request: through which Envoy, for which tenant, sent and answered at (Unix
/// seconds), and Envoy's status.
#[derive(Clone, Debug)]
pub struct Sent {
    pub envoy: usize,
    pub tenant: &'static str,
    pub sent: f64,
    pub answered: f64,
    pub status: u16,
}

impl Sent {
    pub fn admitted(&self) -> bool {
        self.status == 200
    }
}

/// Load running until [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Sent>>>,
}

impl Load {
    /// Starts every offer against `envoys` (their listeners).
    pub fn start(envoys: &[SocketAddr], offers: &[Offer]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = offers
            .iter()
            .enumerate()
            .map(|(index, offer)| {
                let (offer, address, stop) = (*offer, envoys[offer.envoy], Arc::clone(&stop));
                // Threads start spread over one request interval, not in step.
                let phase = Duration::from_secs_f64(
                    (index as f64 / offers.len() as f64) / offer.per_second,
                );
                std::thread::spawn(move || offer_until_stopped(offer, address, phase, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the load: every request, in the order sent.
    pub fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::SeqCst);
        let mut sent: Vec<Sent> = self
            .threads
            .into_iter()
            .flat_map(|thread| thread.join().unwrap())
            .collect();
        sent.sort_by(|a, b| a.sent.total_cmp(&b.sent));
        sent
    }
}

fn offer_until_stopped(
    offer: Offer,
    address: SocketAddr,
    phase: Duration,
    stop: &AtomicBool,
) -> Vec<Sent> {
    let every = Duration::from_secs_f64(1.0 / offer.per_second);
    let mut connection =
        HttpConnection::connect(address.port(), &[("x-tenant", offer.tenant)]).unwrap();
    let mut sent = Vec::new();
    let mut next = Instant::now() + phase;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let at = now_seconds();
        // A connection that fails is replaced and the GET sent again (at most 3 times);
        // 0 if Envoy never answers.
        let status = (0..3).find_map(|_| connection.get().ok()).unwrap_or(0);
        sent.push(Sent {
            envoy: offer.envoy,
            tenant: offer.tenant,
            sent: at,
            answered: now_seconds(),
            status,
        });
        next += every;
        // Behind by more than a second (the machine stalled): resume the pace from now
        // rather than burst to catch up.
        if Instant::now().saturating_duration_since(next) > Duration::from_secs(1) {
            next = Instant::now();
        }
    }
    sent
}
