//! `torchft.LighthouseService`: `Quorum` and `Heartbeat` as axum handlers around tonic's
//! unary gRPC framing. A `Quorum` call is a long poll: it waits, as a oneshot in the
//! driver's routes, for a quorum that contains its requester; the whole call (its body
//! included) is bounded by the client's `grpc-timeout` (at most [`MAX_QUORUM_WAIT`]), after
//! which it answers `DEADLINE_EXCEEDED`; a call that ends, however, is forgotten by the core.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dt_rdzv_proto::torchft::{CallId, Input, Refusal};
use prost::Message;
use tokio::sync::oneshot;
use tonic::Status;
use tonic::metadata::MetadataMap;
use tonic::server::{Grpc, UnaryService};
use tonic_prost::ProstCodec;

use super::LighthouseDoor;
use super::wire::{self, Empty, HeartbeatRequest, QuorumRequest, QuorumResponse, QuorumWire};

/// The `Quorum` method's path.
pub(crate) const QUORUM_PATH: &str = "/torchft.LighthouseService/Quorum";
/// The `Heartbeat` method's path.
pub(crate) const HEARTBEAT_PATH: &str = "/torchft.LighthouseService/Heartbeat";
/// Longest a `Quorum` call waits (torchft's client asks 60 s; users raise it to 6000 s).
pub(crate) const MAX_QUORUM_WAIT: Duration = Duration::from_secs(2 * 3600);
/// Longest a `Heartbeat` call may take (its body arriving, mostly).
const MAX_HEARTBEAT_WAIT: Duration = Duration::from_secs(60);
/// Largest request message (a `QuorumMember` is bounded tighter by the core's limits).
const MAX_MESSAGE: usize = 256 << 10;
/// Metadata naming the job (dt-rdzv's), and torchft PR #189's.
const JOB_HEADERS: [&str; 2] = ["x-dtcomm-job", "room-id"];

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Parses `grpc-timeout` (`<digits><H|M|S|m|u|n>`, at most 8 digits).
pub(crate) fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The job a call names (`""`: the default job).
fn job_key(metadata: &MetadataMap) -> Result<String, Status> {
    for name in JOB_HEADERS {
        if let Some(v) = metadata.get(name) {
            return v
                .to_str()
                .map(str::to_owned)
                .map_err(|_| Status::invalid_argument(format!("{name} is not ASCII text")));
        }
    }
    Ok(String::new())
}

fn status(r: Refusal) -> Status {
    match r {
        Refusal::InvalidArgument(m) => Status::invalid_argument(m),
        Refusal::ResourceExhausted(m) => Status::resource_exhausted(m),
    }
}

fn status_response(s: Status) -> Response {
    s.into_http::<Body>()
}

/// Forgets a quorum call when it ends (answered, deadline, client gone).
struct Cancel {
    door: Arc<LighthouseDoor>,
    call: CallId,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let call = self.call;
        self.door.driver.with(|g| {
            g.routes.quorums.remove(&call);
            g.handle(Instant::now(), Input::Cancel { call });
        });
    }
}

impl LighthouseDoor {
    async fn quorum_call(
        self: Arc<Self>,
        req: tonic::Request<QuorumRequest>,
    ) -> Result<tonic::Response<QuorumResponse>, Status> {
        let job = job_key(req.metadata())?;
        let raw = req
            .into_inner()
            .requester
            .ok_or_else(|| Status::invalid_argument("missing requester"))?;
        let member = wire::QuorumMember::decode(raw.clone())
            .map_err(|e| Status::invalid_argument(format!("requester: {e}")))?
            .into_member(raw);
        let call = self.call_id();
        let (tx, rx) = oneshot::channel();
        self.driver.with(|g| {
            g.routes.quorums.insert(call, tx);
            g.handle(Instant::now(), Input::Quorum { call, job, member });
        });
        let _cancel = Cancel {
            door: self.clone(),
            call,
        };
        match rx.await {
            Ok(Ok(q)) => Ok(tonic::Response::new(QuorumResponse {
                quorum: Some(QuorumWire::of(&q)),
            })),
            Ok(Err(r)) => Err(status(r)),
            Err(_) => Err(Status::unavailable("the Lighthouse is stopping")),
        }
    }

    fn heartbeat_call(&self, req: tonic::Request<HeartbeatRequest>) -> Result<Empty, Status> {
        let job = job_key(req.metadata())?;
        let replica_id = req.into_inner().replica_id;
        let call = self.call_id();
        self.driver
            .with(|g| {
                g.handle(
                    Instant::now(),
                    Input::Heartbeat {
                        call,
                        job,
                        replica_id,
                    },
                );
                g.routes
                    .heartbeat
                    .take()
                    .expect("the Lighthouse answers every heartbeat")
            })
            .map(|()| Empty {})
            .map_err(status)
    }
}

struct QuorumSvc(Arc<LighthouseDoor>);

impl UnaryService<QuorumRequest> for QuorumSvc {
    type Response = QuorumResponse;
    type Future = BoxFuture<Result<tonic::Response<QuorumResponse>, Status>>;

    fn call(&mut self, req: tonic::Request<QuorumRequest>) -> Self::Future {
        Box::pin(self.0.clone().quorum_call(req))
    }
}

struct HeartbeatSvc(Arc<LighthouseDoor>);

impl UnaryService<HeartbeatRequest> for HeartbeatSvc {
    type Response = Empty;
    type Future = BoxFuture<Result<tonic::Response<Empty>, Status>>;

    fn call(&mut self, req: tonic::Request<HeartbeatRequest>) -> Self::Future {
        let r = self.0.heartbeat_call(req).map(tonic::Response::new);
        Box::pin(async move { r })
    }
}

/// `LighthouseService/Quorum`.
pub(crate) async fn quorum(State(door): State<Arc<LighthouseDoor>>, req: Request) -> Response {
    let wait = grpc_timeout(req.headers()).map_or(MAX_QUORUM_WAIT, |t| t.min(MAX_QUORUM_WAIT));
    let mut grpc = Grpc::new(ProstCodec::<QuorumResponse, QuorumRequest>::default())
        .max_decoding_message_size(MAX_MESSAGE);
    match tokio::time::timeout(wait, grpc.unary(QuorumSvc(door), req)).await {
        Ok(r) => r.map(Body::new),
        Err(_) => status_response(Status::deadline_exceeded(
            "no quorum containing the requester was issued within the call's timeout",
        )),
    }
}

/// `LighthouseService/Heartbeat`.
pub(crate) async fn heartbeat(State(door): State<Arc<LighthouseDoor>>, req: Request) -> Response {
    let wait =
        grpc_timeout(req.headers()).map_or(MAX_HEARTBEAT_WAIT, |t| t.min(MAX_HEARTBEAT_WAIT));
    let mut grpc = Grpc::new(ProstCodec::<Empty, HeartbeatRequest>::default())
        .max_decoding_message_size(MAX_MESSAGE);
    match tokio::time::timeout(wait, grpc.unary(HeartbeatSvc(door), req)).await {
        Ok(r) => r.map(Body::new),
        Err(_) => status_response(Status::deadline_exceeded(
            "the heartbeat did not arrive in time",
        )),
    }
}

/// Anything else: `UNIMPLEMENTED` to a gRPC client, 404 to a browser.
pub(crate) async fn fallback(req: Request) -> Response {
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if grpc {
        return status_response(Status::unimplemented(format!(
            "{} is not served here (only torchft.LighthouseService/Quorum and /Heartbeat)",
            req.uri().path()
        )));
    }
    (
        StatusCode::NOT_FOUND,
        "not found: GET /status, GET /status.json, POST /replica/{id}/kill, or torchft.LighthouseService over gRPC\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        let mut h = HeaderMap::new();
        assert_eq!(grpc_timeout(&h), None);
        for (v, d) in [
            ("59999968u", Some(Duration::from_micros(59_999_968))),
            ("123456789S", None),
            ("5999996m", Some(Duration::from_millis(5_999_996))),
            ("1H", Some(Duration::from_secs(3600))),
            ("2S", Some(Duration::from_secs(2))),
            ("500000n", Some(Duration::from_micros(500))),
            ("10x", None),
            ("S", None),
        ] {
            h.insert("grpc-timeout", v.parse().unwrap());
            assert_eq!(grpc_timeout(&h), d, "{v}");
        }
    }
}
