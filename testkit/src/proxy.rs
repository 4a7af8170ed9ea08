//! A loopback TCP proxy in front of a server that can lose a reply: armed with
//! [`CuttingProxy::cut_next_reply`], it lets the next command through, waits for the server's
//! reply (so the server has run the command), drops that reply and closes the client's
//! connection. A client that sends the command again through a new connection charges
//! twice; one that treats the lost reply as an unknown outcome charges once.
//!
//! It runs on a Tokio runtime of its own, in a thread, so sync and async tests use it alike;
//! dropping the proxy stops it (and every connection through it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A proxy on a free loopback port forwarding to `127.0.0.1:target`.
pub struct CuttingProxy {
    /// The port clients connect to.
    pub port: u16,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    /// Replies still to drop (each with its connection).
    cuts: AtomicUsize,
    /// Replies dropped so far.
    cut: AtomicUsize,
}

impl CuttingProxy {
    /// Starts a proxy to `127.0.0.1:target`.
    pub fn start(target: u16) -> CuttingProxy {
        let shared = Arc::new(Shared {
            cuts: AtomicUsize::new(0),
            cut: AtomicUsize::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking");
        let in_thread = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(serve(listener, target, in_thread, stopped));
        });
        CuttingProxy {
            port,
            shared,
            stop,
            thread: Some(thread),
        }
    }

    /// Drops the next reply the server sends (on any connection) and closes that client
    /// connection, after the server has run the command.
    pub fn cut_next_reply(&self) {
        self.shared.cuts.fetch_add(1, Ordering::SeqCst);
    }

    /// How many replies were dropped so far.
    pub fn replies_cut(&self) -> usize {
        self.shared.cut.load(Ordering::SeqCst)
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    target: u16,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let listener = TcpListener::from_std(listener).expect("a Tokio listener");
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                connections.spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await {
                        relay(client, server, shared).await;
                    }
                });
            }
        }
    }
}

/// Forwards both ways until either side closes, or a reply is cut.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    if server_write.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let downstream = async {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    let cut = shared
                        .cuts
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cuts| {
                            cuts.checked_sub(1)
                        })
                        .is_ok();
                    if cut {
                        // The server ran the command and answered: the client never hears it.
                        shared.cut.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    if client_write.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    // Whichever ends first ends the connection: both halves are dropped (closed) here.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
