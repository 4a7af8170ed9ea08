//! The `tower` middleware: check each request, answer refusals, decorate admitted
//! responses.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use super::headers::{self, HeaderOptions};
use crate::decision::{Decision, Source};
use crate::in_flight::InFlight;
use crate::key::Inputs;
use crate::limiter::{CheckError, RateLimiter};
use crate::policy::Fallback;
use crate::store::BoxFuture;

/// What to check a request against: a policy, the inputs its key templates need, a cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The policy name.
    pub policy: String,
    /// Inputs for the key templates (API key, tenant, route...).
    pub inputs: Inputs,
    /// Units the request costs (default 1).
    pub cost: u64,
}

impl Check {
    /// A check of cost 1 against `policy`, with no inputs yet.
    pub fn new(policy: impl Into<String>) -> Self {
        Self {
            policy: policy.into(),
            inputs: Inputs::new(),
            cost: 1,
        }
    }

    /// Adds an input.
    #[must_use]
    pub fn input(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.inputs.set(name, value);
        self
    }

    /// Sets the cost (0 is refused by the check: the request is answered `500`).
    #[must_use]
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }
}

/// A `tower` layer that rate-limits requests (works with axum, hyper and tonic-style
/// stacks).
///
/// `classify` maps a request's head to a [`Check`], or to `None` to let it through
/// unchecked. A refused request is answered `429 Too Many Requests` (or `503 Service
/// Unavailable` when the store is out of reach and the policy fails closed) with
/// `Retry-After`, the `RateLimit-Policy` and `RateLimit` fields and an
/// `application/problem+json` body; the inner service never sees it. Admitted responses
/// carry the fields too (see [`HeaderOptions`]). A request admitted by a paced limit is
/// held for its [`wait`](Decision::wait) before the inner service is called; the slots of
/// in-flight limits are released when the inner service has answered (the response body
/// is not waited for). A check that cannot be made (an unknown
/// policy, an input `classify` forgot) is a bug in the service: it is answered `500`.
///
/// Layers stack: a default policy on every route (`Router::layer`) and a route's own inside
/// it (`route_layer`) decide a request all or nothing. A request the inner layer refuses
/// spends nothing of the outer policy: the outer layer sees the [`Refused`] mark on the
/// answer and gives back, once, what it charged (its refund and its in-flight slots, see
/// [`RateLimiter::give_back`]), and leaves the refusal's fields alone, so `RateLimit`,
/// `RateLimit-Policy` and `Retry-After` all describe the policy that refused. An admitted
/// response lists every layer's items, the outer's first (both fields are lists).
///
/// The response body type only needs `From<String>` (axum's `Body`, `Full<Bytes>`...).
#[derive(Clone)]
pub struct RateLimitLayer<F> {
    limiter: RateLimiter,
    classify: Arc<F>,
    options: HeaderOptions,
    on_error: OnError,
}

/// The response extension marking an answer a [`RateLimitLayer`] gave itself, without
/// calling the service: a refusal (`429`, or `503` when the store is out of reach and the
/// policy fails closed) or the `500` of a check that could not be made. A rate-limit layer
/// around it gives back what it charged the request and adds no fields of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The policy of the layer that answered.
    pub policy: String,
}

/// What the layer does with a check that could not be made (the detail of a `500`).
type OnError = Arc<dyn Fn(&Check, &CheckError) + Send + Sync>;

/// The default: one line on standard error, naming the policy and what is wrong.
fn log_to_stderr(check: &Check, error: &CheckError) {
    eprintln!(
        "rate limit: a request for policy '{}' could not be checked ({error}); answered 500",
        check.policy
    );
}

impl<F> RateLimitLayer<F>
where
    F: Fn(&Parts) -> Option<Check> + Send + Sync + 'static,
{
    /// A layer checking requests with `limiter`, as `classify` says.
    pub fn new(limiter: RateLimiter, classify: F) -> Self {
        Self {
            limiter,
            classify: Arc::new(classify),
            options: HeaderOptions::default(),
            on_error: Arc::new(log_to_stderr),
        }
    }

    /// Reports checks that could not be made (an unknown policy, an input `classify` did not
    /// give) to `report` instead of standard error, e.g. to the service's logger. The
    /// client gets a `500` with a generic body either way.
    #[must_use]
    pub fn on_error(
        mut self,
        report: impl Fn(&Check, &CheckError) + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Arc::new(report);
        self
    }

    /// Chooses which header fields are sent.
    #[must_use]
    pub fn headers(mut self, options: HeaderOptions) -> Self {
        self.options = options;
        self
    }
}

impl<S, F> Layer<S> for RateLimitLayer<F> {
    type Service = RateLimitService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
            classify: Arc::clone(&self.classify),
            options: self.options,
            on_error: Arc::clone(&self.on_error),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around an inner service.
pub struct RateLimitService<S, F> {
    inner: S,
    limiter: RateLimiter,
    classify: Arc<F>,
    options: HeaderOptions,
    on_error: OnError,
}

impl<S: Clone, F> Clone for RateLimitService<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            classify: Arc::clone(&self.classify),
            options: self.options,
            on_error: Arc::clone(&self.on_error),
        }
    }
}

impl<S, F, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, F>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    F: Fn(&Parts) -> Option<Check> + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready is the one to call; leave a clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        let check = (self.classify)(&parts);
        let request = Request::from_parts(parts, body);
        let limiter = self.limiter.clone();
        let options = self.options;
        let on_error = Arc::clone(&self.on_error);
        Box::pin(async move {
            let Some(check) = check else {
                return inner.call(request).await;
            };
            let decision = match limiter
                .check_cost(&check.policy, &check.inputs, check.cost)
                .await
            {
                Ok(decision) => decision,
                Err(error) => {
                    // The detail names the service's configuration: it is for the
                    // operator's log, not for the client.
                    (on_error)(&check, &error);
                    let body = "{\"title\":\"Internal Server Error\",\"status\":500,\"detail\":\"The request could not be checked against its rate limit.\"}";
                    let mut response = problem(StatusCode::INTERNAL_SERVER_ERROR, body.to_string());
                    mark_refused(&mut response, check.policy);
                    return Ok(response);
                }
            };
            let policy = limiter.policy(&decision.policy);
            if !decision.allowed {
                let status = refusal_status(&decision, policy.map(|p| p.fallback()));
                let mut response = problem(status, headers::problem_body(&decision, status));
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    // No limit was consulted: no quota to show, only when to come back.
                    headers::insert_retry_after(response.headers_mut(), &decision);
                } else {
                    headers::insert(response.headers_mut(), &decision, policy, options);
                }
                mark_refused(&mut response, check.policy);
                return Ok(response);
            }
            // Slots in in-flight limits are held until the service has answered.
            let slots = SlotGuard {
                limiter: limiter.clone(),
                in_flight: decision.in_flight.clone(),
            };
            // A paced request was admitted on a schedule: it proceeds when its turn comes.
            if !decision.wait.is_zero() {
                tokio::time::sleep(decision.wait).await;
            }
            let answered = inner.call(request).await;
            let refused_inside = answered
                .as_ref()
                .is_ok_and(|response| response.extensions().get::<Refused>().is_some());
            if refused_inside {
                // A policy inside refused the request: it spends nothing of this one. (The
                // check was made with these very arguments, so they render again.)
                let _ = limiter
                    .refund_spent(&check.policy, &check.inputs, check.cost, &decision)
                    .await;
            }
            slots.release().await;
            let mut response = answered?;
            if options.on_admitted && !refused_inside {
                headers::insert(response.headers_mut(), &decision, policy, options);
            }
            Ok(response)
        })
    }
}

/// The in-flight slots of a request being served: released when the service has answered,
/// or, if the request is dropped before (the client went away), by a task spawned on drop.
struct SlotGuard {
    limiter: RateLimiter,
    in_flight: Option<InFlight>,
}

impl SlotGuard {
    async fn release(mut self) {
        if let Some(in_flight) = self.in_flight.take() {
            self.limiter.release(&in_flight).await;
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let limiter = self.limiter.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { limiter.release(&in_flight).await });
        }
    }
}

/// 429 for a quota refusal; 503 when the store is out of reach and the policy fails closed
/// (the client is not over any quota; the service just cannot tell).
fn refusal_status(decision: &Decision, fallback: Option<Fallback>) -> StatusCode {
    if decision.source == Source::Fallback
        && decision.limits.is_empty()
        && fallback == Some(Fallback::Closed)
    {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    }
}

/// Marks a response the layer answered itself, for the rate-limit layers around it.
fn mark_refused<B>(response: &mut Response<B>, policy: String) {
    response.extensions_mut().insert(Refused { policy });
}

fn problem<B: From<String>>(status: StatusCode, body: String) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
