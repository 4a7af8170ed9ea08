//! Accepting and opening connections within bounds: a slot per open connection (the cap),
//! an accept loop that backs off when accepting fails for want of resources, and the TLS
//! handshake and first bytes within a deadline, which also tell HTTP/1.1 from HTTP/2.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The pause after an accept fails for want of resources (file descriptors, memory): a
/// process at its limit waits for connections to close instead of spinning a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// At most one warning about such failures per this long.
const ACCEPT_WARNING_EVERY: Duration = Duration::from_secs(10);

/// What an HTTP/2 connection sends first (RFC 9113 §3.4), followed by a SETTINGS frame.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame's header: length (3 bytes), type, flags, stream (4 bytes).
const FRAME_HEADER_BYTES: usize = 9;

/// The SETTINGS frame's type.
const SETTINGS_FRAME: u8 = 0x4;

/// The largest frame a peer may send before the settings say otherwise (RFC 9113 §4.2);
/// a larger first SETTINGS is read only this far (h2 then refuses it).
const MAX_FRAME_BYTES: u32 = 16_384;

/// A listener whose connections take a slot each, at most `max` at once.
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    max: u32,
    name: &'static str,
    warned_at: Option<Instant>,
}

impl Acceptor {
    /// Accepts on `listener` (`name` in the log), at most `max_connections` open at once.
    pub fn new(listener: TcpListener, max_connections: usize, name: &'static str) -> Self {
        let max =
            u32::try_from(max_connections.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self {
            listener,
            slots: Arc::new(Semaphore::new(usize::try_from(max).unwrap_or(1))),
            max,
            name,
            warned_at: None,
        }
    }

    /// The next connection, once a slot is free: the kernel holds the others in its
    /// backlog meanwhile. The slot is given back when the connection is dropped.
    pub async fn accept(&mut self) -> (TcpStream, SocketAddr, OwnedSemaphorePermit) {
        loop {
            let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
                // The semaphore is never closed.
                return std::future::pending().await;
            };
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    // Without TCP_NODELAY, a response written in two segments waits for
                    // the peer's delayed ACK (40 ms).
                    let _ = stream.set_nodelay(true);
                    return (stream, peer, slot);
                }
                Err(error) if is_per_connection(&error) => {}
                Err(error) => {
                    drop(slot);
                    let now = Instant::now();
                    if self
                        .warned_at
                        .is_none_or(|at| now.duration_since(at) >= ACCEPT_WARNING_EVERY)
                    {
                        self.warned_at = Some(now);
                        tracing::warn!(
                            "{} listener: cannot accept ({error}); retrying every {} ms",
                            self.name,
                            ACCEPT_BACKOFF.as_millis()
                        );
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    /// Resolves once every connection accepted here is closed.
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        let slots = Arc::clone(&self.slots);
        let max = self.max;
        async move {
            let _ = slots.acquire_many(max).await;
        }
    }
}

/// An error of one connection (the next accept may succeed at once), not of the process.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// What a connection speaks, told from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.x.
    Http1,
    /// HTTP/2 with prior knowledge (gRPC, h2c, or h2 over TLS).
    Http2,
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An open connection: its transport, the first bytes read to tell its protocol (read
/// again first), its slot, and the signal that closes it at the shutdown deadline.
pub struct Conn {
    transport: Transport,
    replay: Vec<u8>,
    peer: SocketAddr,
    close: CancellationToken,
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    _slot: OwnedSemaphorePermit,
}

impl Conn {
    /// The client certificate presented over TLS (its chain's first, DER), if any.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        match &self.transport {
            Transport::Tls(stream) => stream
                .get_ref()
                .1
                .peer_certificates()?
                .first()
                .map(|certificate| certificate.as_ref()),
            Transport::Plain(_) => None,
        }
    }
}

/// Completes the TLS handshake (with `tls`) and reads the first bytes of a connection
/// (HTTP/2's whole preface, its SETTINGS frame included), within `timeout`; `None` when it
/// is too slow, fails, or closes.
pub async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    tls: Option<&TlsAcceptor>,
    timeout: Duration,
    close: &CancellationToken,
) -> Option<(Conn, Protocol)> {
    let opening = async {
        let mut transport = match tls {
            Some(acceptor) => Transport::Tls(Box::new(acceptor.accept(stream).await.ok()?)),
            None => Transport::Plain(stream),
        };
        let mut head = Vec::with_capacity(H2_PREFACE.len());
        let protocol = loop {
            let mut chunk = [0u8; H2_PREFACE.len()];
            let wanted = H2_PREFACE.len().saturating_sub(head.len());
            let read = transport.read(chunk.get_mut(..wanted)?).await.ok()?;
            if read == 0 {
                return None;
            }
            head.extend_from_slice(chunk.get(..read)?);
            if !H2_PREFACE.starts_with(&head) {
                break Protocol::Http1;
            }
            if head.len() == H2_PREFACE.len() {
                break Protocol::Http2;
            }
        };
        if protocol == Protocol::Http2 {
            // The preface's second half, the client's SETTINGS frame, comes in time too.
            let mut frame = [0u8; FRAME_HEADER_BYTES];
            transport.read_exact(&mut frame).await.ok()?;
            let [length_high, length_middle, length_low, kind, ..] = frame;
            if kind != SETTINGS_FRAME {
                return None;
            }
            let length = u32::from_be_bytes([0, length_high, length_middle, length_low]);
            let mut settings = vec![0u8; usize::try_from(length.min(MAX_FRAME_BYTES)).ok()?];
            transport.read_exact(&mut settings).await.ok()?;
            head.extend_from_slice(&frame);
            head.extend_from_slice(&settings);
        }
        Some((transport, head, protocol))
    };
    let (transport, replay, protocol) = tokio::time::timeout(timeout, opening).await.ok()??;
    // A token of its own: a read that waits registers with it, not with one shared by
    // every connection.
    let close = close.child_token();
    let closing = Box::pin(close.clone().cancelled_owned());
    let conn = Conn {
        transport,
        replay,
        peer,
        close,
        closing,
        _slot: slot,
    };
    Some((conn, protocol))
}

fn closed_at_deadline() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed at the shutdown deadline",
    )
}

impl Conn {
    /// `Ready(Err)` once the shutdown deadline closed the connection; registers the task
    /// to be woken then.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.closing.as_mut().poll(cx).is_ready() {
            Poll::Ready(closed_at_deadline())
        } else {
            Poll::Pending
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.close.is_cancelled() {
            return Poll::Ready(Err(closed_at_deadline()));
        }
        if !this.replay.is_empty() {
            let count = this.replay.len().min(buf.remaining());
            buf.put_slice(this.replay.get(..count).unwrap_or_default());
            this.replay.drain(..count);
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut this.transport).poll_read(cx, buf) {
            Poll::Pending => this.poll_closed(cx).map(Err),
            ready => ready,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.close.is_cancelled() {
            return Poll::Ready(Err(closed_at_deadline()));
        }
        match Pin::new(&mut this.transport).poll_write(cx, data) {
            Poll::Pending => this.poll_closed(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.close.is_cancelled() {
            return Poll::Ready(Err(closed_at_deadline()));
        }
        match Pin::new(&mut this.transport).poll_write_vectored(cx, data) {
            Poll::Pending => this.poll_closed(cx).map(Err),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.transport.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.close.is_cancelled() {
            return Poll::Ready(Err(closed_at_deadline()));
        }
        match Pin::new(&mut this.transport).poll_flush(cx) {
            Poll::Pending => this.poll_closed(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().transport).poll_shutdown(cx)
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_write(cx, data),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, data),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, data),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(stream) => stream.is_write_vectored(),
            Self::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(self.peer),
        }
    }
}
