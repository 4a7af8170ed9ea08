//! Envoy's Rate Limit Quota Service (`envoy.service.rate_limit_quota.v3`, the
//! `envoy.filters.http.rate_limit_quota` filter), on the gRPC listener beside RLS: each
//! Envoy instance (one stream) reports its buckets' usage and decides locally from the
//! token bucket it is assigned per bucket, whose tokens were charged to the bucket's limit
//! in Redis before they were assigned. So, over any window of the limit, the requests the
//! Envoys admit are at most the quota plus the tokens outstanding (charged, not yet
//! settled) at its start: `docs/rlqs.md`.
//!
//! Buckets are matched to the YAML rules by the domain and the bucket id's entries
//! ([`bucket`]); tokens are sized from each instance's share of the recent demand
//! ([`share`]); a stream's buckets live in [`stream`].

pub mod bucket;
pub mod fleet;
pub mod lease;
pub mod ledger;
pub mod share;
pub mod shared;
pub mod stream;

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use redis_ratelimit_client::store::Store;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};

use crate::engine::Engine;
use crate::grpc::Authenticate;
pub use shared::Settings;
use shared::Shared;
use stream::{End, Stream};

/// Streams open at once; past it a stream is refused with `RESOURCE_EXHAUSTED`.
pub const MAX_STREAMS: usize = 1_024;
/// Largest report message accepted.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// Answers waiting to be sent on one stream.
const OUTBOUND_QUEUE: usize = 16;

/// The gRPC service.
#[derive(Clone)]
pub struct Rlqs {
    shared: Arc<Shared>,
}

/// The service as served.
pub type Service = InterceptedService<RateLimitQuotaServiceServer<Rlqs>, Authenticate>;

impl Rlqs {
    /// The service over the engine's rules and the limiter's store (tokens are charged to
    /// the same keys RLS charges).
    ///
    /// Starts the exchange of demand with the other services sharing Redis ([`fleet`]) on
    /// the runtime it is called on (none: not exchanged).
    pub fn new(engine: Arc<Engine>, store: Arc<dyn Store>, settings: Settings) -> Self {
        let shared = Arc::new(Shared {
            engine,
            store,
            demand: share::Demand::default(),
            fleet: fleet::Fleet::default(),
            settings,
            streams: AtomicUsize::new(0),
            next_stream: AtomicU64::new(0),
            stopping: CancellationToken::new(),
            charged: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(exchange_demand(Arc::clone(&shared)));
        }
        Self { shared }
    }

    /// Tokens charged and refunded so far, across every stream.
    #[cfg(test)]
    pub fn tokens(&self) -> (u64, u64) {
        (
            self.shared.charged.load(Ordering::Relaxed),
            self.shared.refunded.load(Ordering::Relaxed),
        )
    }

    /// Expires every assignment at once (TTL 0) and ends the streams: the service stops.
    pub fn stop(&self) {
        self.shared.stopping.cancel();
    }

    /// The service as served, with `authenticate` (the RLS listener's token).
    pub fn service(self, authenticate: Authenticate) -> Service {
        let server =
            RateLimitQuotaServiceServer::new(self).max_decoding_message_size(MAX_MESSAGE_BYTES);
        InterceptedService::new(server, authenticate)
    }
}

/// Exchanges the demand on the contended limits with the other services until this one
/// stops ([`fleet`]).
async fn exchange_demand(shared: Arc<Shared>) {
    let every = fleet::Fleet::exchange_every(stream::renewal_period(shared.settings.ttl));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            _ = ticks.tick() => {}
            () = shared.fleet.newly_contended.notified() => {}
        }
        shared
            .fleet
            .exchange(&shared.demand, shared.store.as_ref(), every)
            .await;
    }
}

/// Counts a stream open while it lives.
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

type Answers =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<RateLimitQuotaResponse, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, GrpcStatus> {
        let shared = Arc::clone(&self.shared);
        if shared.streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
            shared.streams.fetch_sub(1, Ordering::SeqCst);
            return Err(GrpcStatus::resource_exhausted(format!(
                "this service serves at most {MAX_STREAMS} RLQS streams at once"
            )));
        }
        if shared.stopping.is_cancelled() {
            shared.streams.fetch_sub(1, Ordering::SeqCst);
            return Err(GrpcStatus::unavailable("the service is stopping"));
        }
        let open = Open(Arc::clone(&shared));
        let id = shared.next_stream.fetch_add(1, Ordering::Relaxed);
        let (out, answers) = mpsc::channel(OUTBOUND_QUEUE);
        let inbound = request.into_inner();
        tokio::spawn(serve_stream(open, id, inbound, out));
        Ok(Response::new(Box::pin(ReceiverStream::new(answers))))
    }
}

/// Serves one stream until Envoy closes it, it sends bad input, or the service stops.
async fn serve_stream(
    open: Open,
    id: u64,
    mut inbound: Streaming<RateLimitQuotaUsageReports>,
    out: stream::Outbound,
) {
    let shared = Arc::clone(&open.0);
    let mut stream = Stream::new(Arc::clone(&shared), id, out.clone());
    let period = stream::renewal_period(shared.settings.ttl);
    let mut renewals = tokio::time::interval(period);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    renewals.tick().await;
    let end = loop {
        let step = tokio::select! {
            () = shared.stopping.cancelled() => {
                stream.expire_all().await;
                break End::Closed;
            }
            message = inbound.message() => match message {
                Ok(Some(report)) => stream.report(report).await,
                Ok(None) => break End::Closed,
                Err(status) => {
                    tracing::debug!("RLQS stream {id} ended: {status}");
                    break End::Closed;
                }
            },
            _ = renewals.tick() => {
                if stream.buckets() == 0 { Ok(()) } else { stream.renew().await }
            }
        };
        if let Err(end) = step {
            break end;
        }
    };
    if let End::Refused(status) = end {
        tracing::debug!("RLQS stream {id} refused: {}", status.message());
        let _ = out.send(Err(status)).await;
    }
    stream.close();
    drop(open);
}
