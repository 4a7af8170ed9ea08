//! The HTTP listener, served by hyper: HTTP/1.1 with a header-read timeout (which also
//! closes a keep-alive connection idle that long), or HTTP/2 with prior knowledge (h2c, or
//! h2 over TLS) with its streams bounded and keep-alive pings. A stop lets each
//! connection finish the requests it has and close.

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::conn::{self, Acceptor, Protocol};
use super::{KEEPALIVE_TIMEOUT, Limits, Stop};

/// The common name of the client certificate a connection presented (mutual TLS), given to
/// each of its requests as an extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerName(pub String);

/// Serves `app` on `acceptor`'s connections until `stop.finish`, then waits for them to
/// close (`stop.close` ends those still open). A connection that presented a client
/// certificate with a common name gives it to its requests ([`PeerName`]).
pub async fn serve(
    mut acceptor: Acceptor,
    tls: Option<TlsAcceptor>,
    app: axum::Router,
    limits: Limits,
    stop: Stop,
) {
    let service = TowerToHyperService::new(app.clone());
    loop {
        let (stream, peer, slot) = tokio::select! {
            () = stop.finish.cancelled() => break,
            accepted = acceptor.accept() => accepted,
        };
        let (tls, mut service, stop) = (tls.clone(), service.clone(), stop.clone());
        let app = app.clone();
        tokio::spawn(async move {
            let opened = conn::open(
                stream,
                peer,
                slot,
                tls.as_ref(),
                limits.header_timeout,
                &stop.close,
            )
            .await;
            let Some((conn, protocol)) = opened else {
                return;
            };
            let peer_name = conn
                .peer_certificate()
                .and_then(crate::certificate::common_name);
            if let Some(name) = peer_name {
                service = TowerToHyperService::new(app.layer(axum::Extension(PeerName(name))));
            }
            let io = TokioIo::new(conn);
            match protocol {
                Protocol::Http1 => {
                    let mut builder = http1::Builder::new();
                    builder
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.header_timeout);
                    finish(builder.serve_connection(io, service), &stop.finish).await;
                }
                Protocol::Http2 => {
                    let mut builder = http2::Builder::new(TokioExecutor::new());
                    builder
                        .timer(TokioTimer::new())
                        .max_concurrent_streams(limits.max_streams)
                        .keep_alive_interval(limits.keepalive)
                        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
                    finish(builder.serve_connection(io, service), &stop.finish).await;
                }
            }
        });
    }
    acceptor.drained().await;
}

/// Runs a connection to its end, asking it to finish and close once `finish` is cancelled.
async fn finish<C: GracefulConnection>(connection: C, finish: &CancellationToken) {
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = finish.cancelled() => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}
