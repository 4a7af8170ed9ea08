//! A userspace TCP proxy that sits on one node's link and, on command, delays, stalls or
//! resets it. The kernel of the machines this runs on has no `netem` qdisc, so link faults
//! are made here: every byte between the clients and the node passes through two threads
//! per connection, which consult the proxy's current [`LinkFault`] before forwarding each
//! chunk.
//!
//! A proxy listens on one address and forwards to one target; the soak gives the proxied
//! node two (its client port, faulted, and its cluster bus port, passed through unharmed),
//! and makes the node announce the proxy's address so that every client and the node's
//! replicas reach it through the proxy.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the link does to traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFault {
    /// Forward at once.
    None,
    /// Hold every chunk this long before forwarding it (in each direction).
    Delay(Duration),
    /// Forward nothing until this instant (bytes wait in the socket buffers).
    StallUntil(Instant),
}

struct Shared {
    target: SocketAddr,
    fault: Mutex<LinkFault>,
    /// Both halves of every open connection, to reset them on command.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    stopping: AtomicBool,
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
            open: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
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
                spawn_pump(&client, &server, shared);
                spawn_pump(&server, &client, shared);
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Copies `from` to `to`, chunk by chunk, applying the link's fault to each chunk; closes
/// both when either side ends.
fn spawn_pump(from: &TcpStream, to: &TcpStream, shared: &Arc<Shared>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let shared = Arc::clone(shared);
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read) = from.read(&mut buffer) {
            if read == 0 {
                break;
            }
            hold(&shared);
            let Some(chunk) = buffer.get(..read) else {
                break;
            };
            if to.write_all(chunk).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// Waits as the current fault says before a chunk goes on.
fn hold(shared: &Shared) {
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let fault = *lock(&shared.fault);
        match fault {
            LinkFault::None => return,
            LinkFault::Delay(delay) => {
                std::thread::sleep(delay);
                return;
            }
            LinkFault::StallUntil(until) => {
                let now = Instant::now();
                if now >= until {
                    return;
                }
                // Re-read the fault every few ms: a heal ends the stall early.
                std::thread::sleep((until - now).min(Duration::from_millis(10)));
            }
        }
    }
}
