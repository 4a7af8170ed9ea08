//! The backend behind Envoy: a small HTTP/1.1 server on a loopback port answering
//! `200 hello` to everything, counting the requests that reach it; stopped on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A small HTTP/1.1 backend answering `200 hello` to everything, counting requests; stopped
/// on drop.
pub struct Backend {
    pub address: SocketAddr,
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Backend {
    pub fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopping) = (Arc::clone(&served), Arc::clone(&stop));
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let count = Arc::clone(&count);
                std::thread::spawn(move || answer(stream, &count));
            }
        });
        Backend {
            address,
            served,
            stop,
            accept: Some(accept),
        }
    }

    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

/// Reads one request head and answers it, closing the connection.
fn answer(mut stream: TcpStream, served: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 65_536 {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    served.fetch_add(1, Ordering::SeqCst);
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.address);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
