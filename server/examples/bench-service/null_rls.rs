//! The floor under the service's CPU per check: the same gRPC stack as the service (tonic on
//! hyper/h2, the same server settings as `server/src/serve/grpc.rs`, a pass-through
//! interceptor and response layer where the service has its own, TCP_NODELAY, tokio's
//! multi-threaded runtime with its default workers) serving the same RLS v3 method, which
//! answers OK for every descriptor at once, without Redis, limits or metrics.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::time::Duration;
use tonic::{Request, Response, Status};

use super::NULL_RLS_BARE_ENV;

struct Null;

#[tonic::async_trait]
impl RateLimitService for Null {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let statuses = request
            .into_inner()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

pub fn main(listen: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let incoming = tonic::transport::server::TcpIncoming::bind(listen.parse().unwrap())
            .unwrap()
            .with_nodelay(Some(true));
        eprintln!(
            "null RLS: gRPC (Envoy RLS v3) on {}",
            incoming.local_addr().unwrap()
        );
        let service = RateLimitServiceServer::new(Null).max_decoding_message_size(64 * 1024);
        if std::env::var_os(NULL_RLS_BARE_ENV).is_some() {
            // Tonic's defaults: no per-request layers (timeout, concurrency limit, load
            // shedding, response map, interceptor), to tell what those cost.
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
                .unwrap();
            return;
        }
        let service =
            tonic::service::interceptor::InterceptedService::new(service, |request: Request<()>| {
                Ok(request)
            });
        tonic::transport::Server::builder()
            .max_concurrent_streams(128)
            .concurrency_limit_per_connection(128)
            .load_shed(true)
            .timeout(Duration::from_secs(10))
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .layer(tower::util::MapResponseLayer::new(
                |response: http::Response<tonic::body::Body>| response,
            ))
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
}
