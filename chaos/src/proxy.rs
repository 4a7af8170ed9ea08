//! A userspace TCP proxy that sits on one node's link and, on command, delays, stalls,
//! blackholes or resets it. The kernel of the machines this runs on has no `netem` qdisc, so
//! link faults are made here: every byte between the clients and the node passes through
//! a reader and a writer thread per direction of each connection; the reader consults the
//! proxy's current [`LinkFault`] and the direction's [`Latency`] for each chunk and stamps it
//! with the instant it is due, the writer forwards it then (in order: TCP keeps order, so
//! a chunk is never due before the one ahead of it).
//!
//! A proxy listens on one address and forwards to one target; the soak gives the proxied
//! node two (its client port, faulted, and its cluster bus port, passed through unharmed),
//! and makes the node announce the proxy's address so that every client and the node's
//! replicas reach it through the proxy. The regions run (`crate::regions`) puts one on each
//! region's link to home, with a one-way latency per direction.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the link does to traffic now, on top of its [`Latency`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFault {
    /// Forward after the link's latency.
    None,
    /// Hold every chunk this long more before forwarding it (in each direction).
    Delay(Duration),
    /// Forward nothing until this instant (bytes wait in the socket buffers).
    StallUntil(Instant),
    /// Accept and read, forward nothing: every chunk read is dropped (a partition that
    /// neither side sees; new connections are accepted, and their bytes dropped too). A
    /// connection that lost bytes is out of step: reset it when the blackhole ends.
    Blackhole,
}

/// One direction of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the clients to the target.
    ToTarget,
    /// From the target back to the clients.
    FromTarget,
}

/// A one-way latency: `base` plus a uniform `[0, jitter]` per chunk (kept in order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    pub base: Duration,
    pub jitter: Duration,
}

struct Shared {
    target: SocketAddr,
    fault: Mutex<LinkFault>,
    latency: Mutex<[Latency; 2]>,
    /// Both halves of every open connection, to reset them on command.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    stopping: AtomicBool,
    /// The jitter's generator state (xorshift), shared by every pump.
    seed: AtomicU64,
}

/// A running proxy; stops accepting and closes every connection on drop.
pub struct Proxy {
    pub listen: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on `bind` (port 0: any free port) and forwards each connection to `target`.
    pub fn start(bind: SocketAddr, target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let listen = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            fault: Mutex::new(LinkFault::None),
            latency: Mutex::new([Latency::default(); 2]),
            open: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            seed: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ u64::from(listen.port())),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = std::thread::spawn(move || accept_loop(&listener, &accepting));
        Ok(Proxy {
            listen,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Sets what the link does from now on.
    pub fn set(&self, fault: LinkFault) {
        *lock(&self.shared.fault) = fault;
    }

    /// Sets one direction's latency for every chunk read from now on.
    pub fn set_latency(&self, direction: Direction, latency: Latency) {
        lock(&self.shared.latency)[direction as usize] = latency;
    }

    /// Resets every open connection (both sides see the connection end); new connections
    /// are accepted as before.
    pub fn reset_all(&self) -> usize {
        let open: Vec<_> = lock(&self.shared.open).drain(..).collect();
        for (client, server) in &open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        open.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.reset_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(2))
                else {
                    // The node is down or cut off: the client sees its connection close,
                    // as it would see a refusal.
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                lock(&shared.open).push((client_copy, server_copy));
                spawn_pump(&client, &server, Direction::ToTarget, shared);
                spawn_pump(&server, &client, Direction::FromTarget, shared);
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Copies `from` to `to`, chunk by chunk: a reader applies the link's fault and stamps each
/// chunk with its due instant, a writer forwards it then; once `from` ends, the writer
/// forwards what is still due, then closes both.
fn spawn_pump(from: &TcpStream, to: &TcpStream, direction: Direction, shared: &Arc<Shared>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let Ok(from_again) = from.try_clone() else {
        return;
    };
    let (due_tx, due_rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reading = Arc::clone(shared);
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        let mut last_due = Instant::now();
        while let Ok(read) = from.read(&mut buffer) {
            if read == 0 {
                break;
            }
            if !hold(&reading) {
                // Blackholed: read and dropped.
                continue;
            }
            let Some(chunk) = buffer.get(..read) else {
                break;
            };
            let due = (Instant::now() + latency_of(&reading, direction)).max(last_due);
            last_due = due;
            if due_tx.send((due, chunk.to_vec())).is_err() {
                break;
            }
        }
        // Dropping the sender ends the writer once it has forwarded what is due.
    });
    std::thread::spawn(move || {
        while let Ok((due, chunk)) = due_rx.recv() {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from_again.shutdown(Shutdown::Both);
    });
}

/// This chunk's one-way latency: the direction's base plus its jitter, plus a `Delay`
/// fault's.
fn latency_of(shared: &Shared, direction: Direction) -> Duration {
    let latency = lock(&shared.latency)[direction as usize];
    let extra = match *lock(&shared.fault) {
        LinkFault::Delay(delay) => delay,
        _ => Duration::ZERO,
    };
    let jitter_us = u64::try_from(latency.jitter.as_micros()).unwrap_or(u64::MAX);
    let drawn_us = if jitter_us == 0 {
        0
    } else {
        next_random(shared) % (jitter_us + 1)
    };
    latency.base + extra + Duration::from_micros(drawn_us)
}

/// xorshift64: the jitter needs no more than a cheap, uncorrelated draw.
fn next_random(shared: &Shared) -> u64 {
    let mut state = shared.seed.load(Ordering::Relaxed);
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    shared.seed.store(state, Ordering::Relaxed);
    state
}

/// Waits as the current fault says before a chunk goes on; `false`: drop the chunk
/// (blackholed).
fn hold(shared: &Shared) -> bool {
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return true;
        }
        let fault = *lock(&shared.fault);
        match fault {
            LinkFault::None | LinkFault::Delay(_) => return true,
            LinkFault::Blackhole => return false,
            LinkFault::StallUntil(until) => {
                let now = Instant::now();
                if now >= until {
                    return true;
                }
                // Re-read the fault every few ms: a heal ends the stall early.
                std::thread::sleep((until - now).min(Duration::from_millis(10)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free loopback port.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 1024];
                    while let Ok(read) = stream.read(&mut buffer) {
                        if read == 0 || stream.write_all(&buffer[..read]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(stream: &mut TcpStream) -> std::io::Result<Duration> {
        let started = Instant::now();
        stream.write_all(b"ping")?;
        let mut reply = [0u8; 4];
        stream.read_exact(&mut reply)?;
        assert_eq!(&reply, b"ping");
        Ok(started.elapsed())
    }

    #[test]
    fn each_direction_adds_its_latency_a_blackhole_forwards_nothing_and_a_reset_ends_it() {
        let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), echo()).unwrap();
        let there = Latency {
            base: Duration::from_millis(40),
            jitter: Duration::from_millis(5),
        };
        let back = Latency {
            base: Duration::from_millis(20),
            jitter: Duration::ZERO,
        };
        proxy.set_latency(Direction::ToTarget, there);
        proxy.set_latency(Direction::FromTarget, back);
        let mut stream = TcpStream::connect(proxy.listen).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let trip = round_trip(&mut stream).unwrap();
        assert!(
            trip >= Duration::from_millis(60) && trip < Duration::from_millis(400),
            "{trip:?}"
        );

        proxy.set(LinkFault::Blackhole);
        stream.write_all(b"lost").unwrap();
        let mut reply = [0u8; 4];
        assert!(
            stream.read_exact(&mut reply).is_err(),
            "a blackhole forwards nothing"
        );
        proxy.set(LinkFault::None);
        assert_eq!(proxy.reset_all(), 1);
        let mut ended = [0u8; 4];
        assert!(
            matches!(stream.read(&mut ended), Ok(0) | Err(_)),
            "the reset ends the connection"
        );
        // A new connection goes through again.
        let mut again = TcpStream::connect(proxy.listen).unwrap();
        again
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(round_trip(&mut again).unwrap() >= Duration::from_millis(60));
    }

    #[test]
    fn a_delay_adds_to_every_chunk_and_a_stall_holds_until_it_ends() {
        let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), echo()).unwrap();
        let mut stream = TcpStream::connect(proxy.listen).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        assert!(round_trip(&mut stream).unwrap() < Duration::from_millis(200));
        proxy.set(LinkFault::Delay(Duration::from_millis(30)));
        // 30 ms each way, not 30 ms per chunk queued behind the others.
        let trip = round_trip(&mut stream).unwrap();
        assert!(
            trip >= Duration::from_millis(60) && trip < Duration::from_millis(500),
            "{trip:?}"
        );
        proxy.set(LinkFault::StallUntil(
            Instant::now() + Duration::from_millis(150),
        ));
        let trip = round_trip(&mut stream).unwrap();
        assert!(trip >= Duration::from_millis(140), "{trip:?}");
        proxy.set(LinkFault::None);
        assert!(round_trip(&mut stream).unwrap() < Duration::from_millis(200));
    }
}
