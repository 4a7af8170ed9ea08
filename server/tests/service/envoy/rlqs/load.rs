//! Load offered through Envoys: one thread per (Envoy, tenant), each sending GETs with the
//! tenant's `x-tenant` header at a steady rate on one keep-alive HTTP/1.1 connection (a new
//! one when Envoy closes it), recording when each request was sent and answered and its
//! status, until stopped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    let mut client = Client::new(address);
    let mut sent = Vec::new();
    let mut next = Instant::now() + phase;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let at = now_seconds();
        let status = client.get(offer.tenant);
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

/// One keep-alive HTTP/1.1 connection to an Envoy listener.
struct Client {
    address: SocketAddr,
    stream: Option<TcpStream>,
}

impl Client {
    fn new(address: SocketAddr) -> Client {
        Client {
            address,
            stream: None,
        }
    }

    /// A GET of `/` as `tenant`: Envoy's status. A connection that fails is replaced and
    /// the request sent again (a GET through Envoy, at most 3 times); 0 if it never answers.
    fn get(&mut self, tenant: &str) -> u16 {
        let request = format!("GET / HTTP/1.1\r\nHost: test\r\nx-tenant: {tenant}\r\n\r\n");
        for _ in 0..3 {
            if self.stream.is_none() {
                let Ok(stream) = TcpStream::connect(self.address) else {
                    continue;
                };
                stream.set_nodelay(true).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                self.stream = Some(stream);
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            match exchange(stream, request.as_bytes()) {
                Some((status, keep_alive)) => {
                    if !keep_alive {
                        self.stream = None;
                    }
                    return status;
                }
                None => self.stream = None,
            }
        }
        0
    }
}

/// Sends `request` and reads one whole answer (by its `Content-Length`): its status and
/// whether the connection stays open; `None` if the connection failed.
fn exchange(stream: &mut TcpStream, request: &[u8]) -> Option<(u16, bool)> {
    stream.write_all(request).ok()?;
    let mut raw = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        let read = stream.read(&mut buffer).ok()?;
        if read == 0 {
            return None;
        }
        raw.extend_from_slice(&buffer[..read]);
        let Some(head_end) = raw.windows(4).position(|window| window == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                line.strip_prefix(name)
                    .map(|value| value.trim().to_string())
            })
        };
        let length: usize = header("content-length:")
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        if raw.len() < head_end + 4 + length {
            continue;
        }
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let keep_alive = header("connection:").is_none_or(|value| value != "close");
        return Some((status, keep_alive));
    }
}
