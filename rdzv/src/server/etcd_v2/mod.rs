//! The etcd v2 door (`--etcd-v2-port`, off by default): etcd's v2 keys API, which etcd 3.6
//! removed, for torch's `etcd` and `etcd-v2` rendezvous backends and `EtcdStore` (through
//! `python-etcd`). The sans-IO [`V2Store`] does the work (TTLs, watches, and a dead run's keys
//! purged when a rerun starts, see [`dt_rdzv_proto::etcd_v2::namespace`]), behind the server's
//! one [`Driver`], which runs its deadlines; this module is axum on hyper around it:
//! parameters in, etcd's JSON and headers out, watches as chunked responses whose headers go
//! out at once (as etcd sends them) and whose body is the event.

mod answers;
mod body;
mod json;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use dt_rdzv_proto::etcd_v2::request::{self, Params, V2Request};
use dt_rdzv_proto::etcd_v2::{
    Answer, ErrorCode, Event, Input, Output, PurgeReason, StoreConfig, V2Error, V2Store, WallClock,
    WatchId,
};
use dt_rdzv_proto::rendezvous::{Scope, authorized};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use self::answers::{ChargedBody, InFlight};
use super::driver::{Driver, Route};
use super::http_serve::{Bounds, accept_loop};
use super::memory::{Door, Held, ServerMemory};

/// Connections open at once (each may hold one watch).
const MAX_CONNECTIONS: usize = 4096;
/// Largest request head.
const MAX_HEAD: usize = 16 << 10;
/// A request head must arrive within this; hyper counts a keep-alive connection's idle time
/// against it too, so it is long: `python-etcd` keeps its pooled connection for the whole
/// run, and an open connection is what marks a run alive (agents touch theirs every 1-5 s).
const HEAD_DEADLINE: Duration = Duration::from_secs(300);
/// Answers larger than this are turned into JSON on a blocking thread.
const BLOCKING_ANSWER: u64 = 1 << 20;
/// The etcd version the door answers as (the API it serves is etcd 3.4's v2).
const ETCD_VERSION: &str = "3.4.23";

/// The door's settings.
#[derive(Debug, Clone)]
pub(crate) struct V2Config {
    /// Required credential (HTTP basic password or bearer token); `None`: no auth.
    pub(crate) token: Option<String>,
    /// The store's bounds and idle TTL.
    pub(crate) store: StoreConfig,
}

/// Where the store's outputs go: the answer to the request just fed, and the pending watches'
/// responses.
#[derive(Default)]
struct Routes {
    /// The answer to the request being handled (taken under the same lock).
    answer: Option<Result<DoorAnswer, V2Error>>,
    watchers: HashMap<WatchId, oneshot::Sender<Event>>,
}

/// The door's state, shared by its connections.
pub(crate) struct V2Door {
    driver: Driver<V2Store, Routes>,
    config: V2Config,
    cluster_id: String,
    next_conn: AtomicU64,
    /// Answers being sent, over every connection (the store bounds them).
    in_flight: InFlight,
    /// Request bodies being read, over every connection (`body.rs`).
    bodies: InFlight,
    /// What the store held after its last request, answers in flight apart.
    held: AtomicU64,
    /// The server's budget, over every door.
    server: Arc<ServerMemory>,
}

impl Held for V2Door {
    fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed) + self.in_flight.bytes()
    }

    fn frames(&self) -> u64 {
        self.bodies.bytes()
    }
}

/// Which connection a request came on (for run namespaces).
#[derive(Debug, Clone, Copy)]
struct Conn(u64);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl V2Door {
    pub(crate) fn new(config: V2Config, server: Arc<ServerMemory>) -> Arc<Self> {
        let now = now_ms();
        let cluster_id = format!("{:016x}", now.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let store = V2Store::new(config.store, WallClock::new(Instant::now(), now));
        Arc::new(Self {
            driver: Driver::new(store, Routes::default()),
            config,
            cluster_id,
            next_conn: AtomicU64::new(0),
            in_flight: InFlight::default(),
            bodies: InFlight::default(),
            held: AtomicU64::new(0),
            server,
        })
    }

    /// Whether the request carries the server token (as a bearer token, or as the password of
    /// HTTP basic auth, which is what `python-etcd` can send).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.config.token else {
            return true;
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|auth| {
                if let Some(b) = auth.strip_prefix("Bearer ") {
                    return Some(b.trim().to_owned());
                }
                use base64::Engine as _;
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(auth.strip_prefix("Basic ")?.trim())
                    .ok()?;
                let text = String::from_utf8(raw).ok()?;
                Some(text.split_once(':')?.1.to_owned())
            });
        given.is_some_and(|g| authorized(Some(token), Scope::Server, &g))
    }

    fn disconnect(&self, conn: u64) {
        self.driver.with(|g| {
            g.handle(Instant::now(), Input::Closed { conn });
            let in_flight = self.in_flight.bytes();
            self.held.store(
                g.core.held_bytes().saturating_sub(in_flight),
                Ordering::Relaxed,
            );
        });
    }

    /// Runs one parsed request; a read's answer is counted in flight (under the store's
    /// lock, so the next read sees it) until the returned charge is dropped.
    fn apply(
        &self,
        conn: u64,
        key: &str,
        request: V2Request,
    ) -> (Result<DoorAnswer, V2Error>, answers::Charge) {
        let key = key.to_owned();
        self.driver.with(|g| {
            let in_flight = self.in_flight.bytes();
            g.core.set_answers_in_flight(in_flight);
            g.core.set_server_budget(
                self.server.data_limit(),
                self.server.elsewhere(Door::EtcdV2),
            );
            g.handle(Instant::now(), Input::Request { conn, key, request });
            self.held.store(
                g.core.held_bytes().saturating_sub(in_flight),
                Ordering::Relaxed,
            );
            let charge = self.in_flight.charge(g.core.take_answer_bytes());
            let answer = g
                .routes
                .answer
                .take()
                .expect("the store answers every request");
            (answer, charge)
        })
    }

    fn cancel(&self, watch: WatchId) {
        self.driver.with(|g| {
            g.core.handle(Instant::now(), Input::Cancel { watch });
            g.routes.watchers.remove(&watch);
        });
    }

    fn headers(&self, index: u64) -> [(header::HeaderName, HeaderValue); 5] {
        let i = HeaderValue::from(index);
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::HeaderName::from_static("x-etcd-cluster-id"),
                HeaderValue::from_str(&self.cluster_id).expect("hex"),
            ),
            (header::HeaderName::from_static("x-etcd-index"), i.clone()),
            (header::HeaderName::from_static("x-raft-index"), i),
            (
                header::HeaderName::from_static("x-raft-term"),
                HeaderValue::from_static("1"),
            ),
        ]
    }

    fn error(&self, e: &V2Error) -> Response {
        tracing::debug!(code = e.code.number(), cause = %e.cause, "etcd v2 request refused");
        let status = StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
        let [ct, cid, idx, ..] = self.headers(e.index);
        (status, [ct, cid, idx], json::error(e)).into_response()
    }
}

/// A request's answer, as the handler sends it.
enum DoorAnswer {
    /// A read's or a write's answer (201 for a new key).
    Now(Event),
    /// A watch answered from the history (always 200).
    Watched(Event),
    /// A pending watch: its index for the headers, and where its event will come.
    Watch(WatchId, u64, oneshot::Receiver<Event>),
}

impl Route<Output> for Routes {
    fn route(&mut self, output: Output) {
        match output {
            Output::Answer { answer, .. } => {
                self.answer = Some(answer.map(|a| match a {
                    Answer::Now(e) => DoorAnswer::Now(e),
                    Answer::Watched(e) => DoorAnswer::Watched(e),
                    Answer::Pending { watch, index } => {
                        let (tx, rx) = oneshot::channel();
                        self.watchers.insert(watch, tx);
                        DoorAnswer::Watch(watch, index, rx)
                    }
                }));
            }
            Output::Watched(d) => {
                if let Some(tx) = self.watchers.remove(&d.watch) {
                    let _ = tx.send(d.event);
                }
            }
            Output::Purged { run, files, reason } => match reason {
                PurgeReason::Rerun => {
                    tracing::info!(run = %run.label(), keys = files, reason = "rerun",
                        "etcd v2: a new run started where no client of the earlier one is left; purged its keys");
                }
                PurgeReason::Idle => {
                    tracing::info!(run = %run.label(), keys = files, reason = "idle",
                        "etcd v2: purged a run no client touched for the namespace TTL");
                }
                PurgeReason::Explicit => {
                    tracing::info!(run = %run.label(), keys = files, reason = "explicit",
                        "etcd v2: purged a run's keys");
                }
            },
        }
    }
}

/// Cancels a pending watch when its response is dropped (the client went away).
struct WatchGuard {
    door: Arc<V2Door>,
    id: WatchId,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.door.cancel(self.id);
    }
}

fn params(method: &Method, uri: &Uri, body: &[u8]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = Vec::new();
    if *method == Method::PUT || *method == Method::POST {
        all.extend(form_urlencoded::parse(body).into_owned());
    }
    if let Some(q) = uri.query() {
        all.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
    }
    all
}

async fn keys(
    State(door): State<Arc<V2Door>>,
    Extension(Conn(conn)): Extension<Conn>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !door.authorized(&headers) {
        super::ratelog::limited!(warn, "etcd v2 request without a valid token refused");
        let e = V2Error::request(ErrorCode::Unauthorized, "Insufficient credentials");
        return door.error(&e);
    }
    let m = match method {
        Method::GET => request::Method::Get,
        Method::PUT => request::Method::Put,
        Method::POST => request::Method::Post,
        Method::DELETE => request::Method::Delete,
        _ => return (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed").into_response(),
    };
    let raw = uri.path().strip_prefix("/v2/keys").unwrap_or("/");
    let key = percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let (body, frame) = match body::read(body, declared, &door.bodies, &door.server).await {
        Ok(read) => read,
        Err(e) => {
            super::ratelog::limited!(warn, "etcd v2 request body refused", why = %e);
            return (e.status(), e.to_string()).into_response();
        }
    };
    let pairs = params(&method, &uri, &body);
    drop((body, frame));
    let (answer, mut charge) = match request::parse(m, &Params(&pairs)) {
        Ok(req) => door.apply(conn, &key, req),
        Err(e) => (Err(e), door.in_flight.charge(0)),
    };
    match answer {
        Err(e) => door.error(&e),
        Ok(DoorAnswer::Now(e)) => {
            let status = if e.created_key() {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let headers = door.headers(e.index);
            // A large answer's JSON is built off the runtime's workers, which other clients'
            // connections (the TCPStore door's among them) share.
            let text = if charge.bytes() > BLOCKING_ANSWER {
                tokio::task::spawn_blocking(move || json::event(&e))
                    .await
                    .unwrap_or_default()
            } else {
                json::event(&e)
            };
            let text = Bytes::from(text);
            charge.resize(text.len() as u64);
            let body = Body::new(ChargedBody::new(text, charge));
            (status, headers, body).into_response()
        }
        Ok(DoorAnswer::Watched(e)) => {
            (StatusCode::OK, door.headers(e.index), json::event(&e)).into_response()
        }
        Ok(DoorAnswer::Watch(id, index, rx)) => {
            let guard = WatchGuard {
                door: door.clone(),
                id,
            };
            let body = futures_util::stream::once(async move {
                let _guard = guard;
                match rx.await {
                    Ok(e) => Ok::<_, std::io::Error>(Bytes::from(json::event(&e))),
                    Err(_) => Err(std::io::Error::other("the server is shutting down")),
                }
            });
            (StatusCode::OK, door.headers(index), Body::from_stream(body)).into_response()
        }
    }
}

async fn version() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            "{{\"etcdserver\":\"{ETCD_VERSION}\",\"etcdcluster\":\"3.4.0\",\"dtrdzv\":\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
    )
        .into_response()
}

/// The client URL this server is reached at, from the request's `Host`.
fn client_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:2379");
    format!("http://{host}")
}

async fn machines(headers: HeaderMap) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        client_url(&headers),
    )
        .into_response()
}

async fn members(State(door): State<Arc<V2Door>>, headers: HeaderMap) -> Response {
    let url = client_url(&headers);
    let body = serde_json::json!({"members": [{
        "id": door.cluster_id, "name": "dt-rdzv", "peerURLs": [], "clientURLs": [url],
    }]});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn router(door: Arc<V2Door>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/health", get(|| async { "{\"health\":\"true\"}" }))
        .route("/v2/machines", get(machines))
        .route("/v2/members", get(members))
        .route("/v2/keys", any(keys))
        .route("/v2/keys/", any(keys))
        .route("/v2/keys/{*key}", any(keys))
        .with_state(door)
}

/// Serves the door until `stop` turns true.
pub(crate) async fn run(listener: TcpListener, door: Arc<V2Door>, stop: watch::Receiver<bool>) {
    let app = router(door.clone());
    let timers = door.clone();
    let timer_stop = stop.clone();
    tokio::spawn(async move { timers.driver.run_timers(timer_stop).await });
    let bounds = Bounds {
        max_connections: MAX_CONNECTIONS,
        max_head: MAX_HEAD,
        head_deadline: HEAD_DEADLINE,
        lifetime: None,
    };
    accept_loop(listener, "etcd v2", bounds, stop, move |_| {
        let conn = door.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let door = door.clone();
        (
            app.clone().layer(Extension(Conn(conn))),
            Box::new(move || door.disconnect(conn)),
        )
    })
    .await;
}
