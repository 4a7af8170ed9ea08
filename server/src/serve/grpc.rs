//! The gRPC listener: tonic's server, given the connections the shared accept loop opened
//! (HTTP/2 only), with its streams, concurrency, request time and keep-alive bounded.

use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;

use super::conn::{self, Acceptor, Conn, Protocol};
use super::{KEEPALIVE_TIMEOUT, Limits, Stop};

/// Opened connections waiting for tonic to take them.
const OPENED_QUEUE: usize = 64;

/// Serves `service` on `acceptor`'s connections until `stop.finish`, then waits for them
/// to close (`stop.close` ends those still open).
pub async fn serve(
    mut acceptor: Acceptor,
    tls: Option<TlsAcceptor>,
    service: crate::grpc::Service,
    rlqs: Option<crate::rlqs::Service>,
    limits: Limits,
    stop: Stop,
) -> Result<(), tonic::transport::Error> {
    let (opened, incoming) = mpsc::channel::<Result<Conn, std::io::Error>>(OPENED_QUEUE);
    let accepting = stop.clone();
    tokio::spawn(async move {
        loop {
            let (stream, peer, slot) = tokio::select! {
                () = accepting.finish.cancelled() => break,
                accepted = acceptor.accept() => accepted,
            };
            let (tls, opened, close) = (tls.clone(), opened.clone(), accepting.close.clone());
            tokio::spawn(async move {
                let header_timeout = limits.header_timeout;
                match conn::open(stream, peer, slot, tls.as_ref(), header_timeout, &close).await {
                    Some((conn, Protocol::Http2)) => {
                        let _ = opened.send(Ok(conn)).await;
                    }
                    // gRPC is HTTP/2: anything else is closed.
                    Some((_, Protocol::Http1)) | None => {}
                }
            });
        }
    });
    // RLQS streams live as long as Envoy keeps them: tonic's `timeout` and concurrency
    // limit hold a call only until its answer's head (its handler's future), so they bound
    // an RLS check whole but only the opening of an RLQS stream, which then holds neither
    // (tests/service/rlqs.rs holds one past the timeout, beside a check with concurrency 1).
    // Open streams are bounded by `--max-streams` per connection and `rlqs::MAX_STREAMS`.
    tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_streams)
        .concurrency_limit_per_connection(limits.grpc_concurrency)
        // Past the concurrency, RESOURCE_EXHAUSTED at once: a queue would wait outside the
        // request timeout.
        .load_shed(true)
        .timeout(limits.request_timeout)
        .http2_keepalive_interval(limits.keepalive)
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(tower::util::MapResponseLayer::new(
            crate::grpc::invalid_protobuf_is_invalid_argument,
        ))
        .add_service(service)
        .add_optional_service(rlqs)
        .serve_with_incoming_shutdown(ReceiverStream::new(incoming), stop.finish.cancelled_owned())
        .await
}
