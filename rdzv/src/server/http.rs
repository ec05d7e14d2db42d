//! The HTTP port (29402), on axum and hyper: `/` (the status page: one self-contained HTML
//! file, no external asset), `/healthz`, `/metrics` (Prometheus text format), `/v1/jobs` and
//! `/v1/jobs/{job}` (JSON), `/v1/jobs/{job}/hang` (why it is stuck, JSON), `/v1/jobs/{job}/timeline[?since=MS]` (its ranks'
//! progress over the last minutes, for the page's picture), `/v1/events?since=N[&job=J]` (the recent events, JSON). The JSON
//! needs `Authorization: Bearer <token>`: the server token for everything, a job token for its
//! own job only. The page itself carries no data; it asks for the token and sends it with each
//! request.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections at once (a new one evicts the one silent or
//! idle the longest, `admission.rs`: a head still arriving or a connection kept alive between
//! requests is idle; when every connection is being served or is new, it gets one of
//! [`RESERVED_CONNECTIONS`] slots that answer `/healthz` only), heads up
//! to [`MAX_HEAD`] bytes (hyper answers 431 past it), a head must arrive within [`DEADLINE`],
//! and a connection lives at most [`CONNECTION_LIFETIME`] (the page polls; nothing streams).
//!
//! The folder `http/` holds the rest of the door: `json` (a job's status as JSON, for
//! `/v1/jobs` and `dt-rdzv status --json`), `metrics` (`/metrics` in the Prometheus text
//! format), `hang_json` (a hang report as JSON), `status_page.html` (the page served at `/`)
//! and `vendor/uplot/` (the charting library the page draws its timelines with, inlined).

pub(super) mod hang_json;
pub(super) mod json;
pub(super) mod metrics;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use dt_rdzv_proto::rendezvous::Scope;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::server::http_serve::{Bounds, Reserve, accept_loop_with_reserve};
use crate::server::native::rendezvous::RdzvCore;
use crate::server::tcpstore::core::StoreCore;

/// Largest request head hyper buffers.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// A request head must arrive within this long.
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);
/// Longest a connection stays open (keep-alive included).
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Most HTTP connections at once (besides the reserved ones).
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Slots reserved for `/healthz`: a connection the full door would refuse gets one, and is
/// answered `/healthz` only, one request, its head within [`RESERVED_DEADLINE`].
pub(crate) const RESERVED_CONNECTIONS: usize = 16;
/// A reserved connection's head must arrive within this long.
pub(crate) const RESERVED_DEADLINE: Duration = Duration::from_secs(1);

/// The status page, with uPlot (`http/vendor/uplot/`, MIT, its license in a comment) inlined
/// where the page marks its place: one self-contained document.
static PAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let license = include_str!("http/vendor/uplot/LICENSE");
    include_str!("http/status_page.html")
        .replacen(
            "/*{uplot.css}*/",
            include_str!("http/vendor/uplot/uPlot.min.css"),
            1,
        )
        .replacen(
            "/*{uplot.js}*/",
            &format!(
                "/* uPlot 1.6.32, vendored from npm (uplot).\n{license}*/\n{}",
                without_banner(include_str!("http/vendor/uplot/uPlot.iife.min.js"))
            ),
            1,
        )
});

/// A script without its leading `/*! ... */` banner (uPlot's names its home page: the page
/// names no address, its license comment says where the library comes from).
fn without_banner(js: &str) -> &str {
    match js
        .strip_prefix("/*!")
        .and_then(|rest| rest.split_once("*/"))
    {
        Some((_, code)) => code.trim_start(),
        None => js,
    }
}

/// What the handlers read.
pub(crate) struct HttpState {
    pub(crate) store: Option<Arc<StoreCore>>,
    pub(crate) rdzv: Arc<RdzvCore>,
    /// Jobs shared with other servers (`--backend`), if so.
    pub(crate) owners: Option<Arc<crate::server::ha::owner::Owners>>,
}

type Shared = Arc<HttpState>;

fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/healthz", get(health))
        .route("/v1/backend", get(backend))
        .route("/metrics", get(metrics))
        .route("/v1/jobs", get(all_jobs))
        .route("/v1/jobs/{job}", get(one_job))
        .route("/v1/jobs/{job}/hang", get(hang))
        .route("/v1/jobs/{job}/timeline", get(timeline))
        .route("/v1/events", get(events))
        .fallback(not_found)
        .with_state(state)
}

pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<HttpState>,
    stop: watch::Receiver<bool>,
) {
    let app_state = state.clone();
    let app = router(state);
    let bounds = Bounds {
        max_connections: MAX_CONNECTIONS,
        max_head: MAX_HEAD,
        head_deadline: DEADLINE,
        lifetime: Some(CONNECTION_LIFETIME),
    };
    let reserve = Reserve {
        slots: RESERVED_CONNECTIONS,
        app: Router::new()
            .route("/healthz", get(health))
            .fallback(reserved_only)
            .with_state(app_state),
        head_deadline: RESERVED_DEADLINE,
    };
    accept_loop_with_reserve(listener, "HTTP", bounds, reserve, stop, |_| {
        (app.clone(), Box::new(|| {}))
    })
    .await;
}

fn token(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or("")
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    let body = serde_json::to_vec_pretty(body).unwrap_or_default();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn refused(what: &str) -> Response {
    tracing::warn!(what, "HTTP request without a valid token refused");
    json_response(
        StatusCode::UNAUTHORIZED,
        &json!({"error": "missing or wrong token: send Authorization: Bearer <token>"}),
    )
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Everything is inline; the page talks to this server only.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE.as_str(),
    )
        .into_response()
}

/// `ok`, or `degraded: why` while the backend does not answer (still 200: the server serves).
async fn health(State(s): State<Shared>) -> String {
    match s.owners.as_ref().map(|o| o.status()) {
        Some(v) if !v["degraded"].is_null() => format!("degraded: {}\n", v["degraded"]),
        _ => "ok\n".into(),
    }
}

/// This server's place in a group sharing a backend (`{"backend": null}` when alone).
async fn backend(State(s): State<Shared>, headers: HeaderMap) -> Response {
    if !s.rdzv.authorized(Scope::Server, token(&headers)) {
        return refused("/v1/backend");
    }
    let v = s
        .owners
        .as_ref()
        .map_or_else(|| json!({"backend": null}), |o| o.status());
    json_response(StatusCode::OK, &v)
}

async fn metrics(State(s): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(s.store.as_deref(), &s.rdzv),
    )
        .into_response()
}

fn jobs(s: &HttpState, job: Option<&str>, headers: &HeaderMap) -> Response {
    let scope = job.map_or(Scope::Server, Scope::Job);
    if !s.rdzv.authorized(scope, token(headers)) {
        return refused("/v1/jobs");
    }
    match s.rdzv.status_views(job) {
        Ok(views) => match job {
            Some(_) => json_response(StatusCode::OK, &json::job_view_json(&views[0])),
            None => {
                let list: Vec<_> = views.iter().map(json::job_view_json).collect();
                json_response(StatusCode::OK, &json!({ "jobs": list }))
            }
        },
        Err(e) => json_response(StatusCode::NOT_FOUND, &json!({ "error": e.to_string() })),
    }
}

async fn all_jobs(State(s): State<Shared>, headers: HeaderMap) -> Response {
    jobs(&s, None, &headers)
}

async fn one_job(State(s): State<Shared>, Path(job): Path<String>, headers: HeaderMap) -> Response {
    jobs(&s, Some(&job), &headers)
}

/// Why a job is stuck: every rank's pending and last completed call, who waits for whom, the
/// culprits in words.
async fn hang(State(s): State<Shared>, Path(job): Path<String>, headers: HeaderMap) -> Response {
    if !s.rdzv.authorized(Scope::Job(&job), token(&headers)) {
        return refused("/v1/jobs/{job}/hang");
    }
    match s.rdzv.hang(&job) {
        Ok(r) => json_response(StatusCode::OK, &hang_json::hang_json(&r)),
        Err(e) => json_response(StatusCode::NOT_FOUND, &json!({ "error": e.to_string() })),
    }
}

/// A job's recent history, for the status page's picture.
/// `?since=MS`: only the samples (and journal marks) after it.
#[derive(serde::Deserialize)]
struct TimelineQuery {
    since: Option<u64>,
}

async fn timeline(
    State(s): State<Shared>,
    Path(job): Path<String>,
    Query(q): Query<TimelineQuery>,
    headers: HeaderMap,
) -> Response {
    if !s.rdzv.authorized(Scope::Job(&job), token(&headers)) {
        return refused("/v1/jobs/{job}/timeline");
    }
    match s.rdzv.timeline(&job, q.since) {
        // Compact: hundreds of numbers per rank, asked for every second.
        Ok(v) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&v).unwrap_or_default(),
        )
            .into_response(),
        Err(e) => json_response(StatusCode::NOT_FOUND, &json!({ "error": e.to_string() })),
    }
}

#[derive(serde::Deserialize)]
struct EventsQuery {
    #[serde(default)]
    since: u64,
    job: Option<String>,
}

async fn events(
    State(s): State<Shared>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    let scope = q.job.as_deref().map_or(Scope::Server, Scope::Job);
    if !s.rdzv.authorized(scope, token(&headers)) {
        return refused("/v1/events");
    }
    let (list, next) = s.rdzv.events(q.since, q.job.as_deref());
    json_response(StatusCode::OK, &json!({ "events": list, "next": next }))
}

/// Anything but `/healthz` on a reserved slot.
async fn reserved_only() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        "busy: every HTTP connection slot is in use; this one, reserved for /healthz, \
         answers nothing else\n",
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: try /, /healthz, /metrics, /v1/jobs, /v1/jobs/JOB/hang, /v1/jobs/JOB/timeline, /v1/events\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    /// The page carries its charting library and its license, and asks nothing of any other
    /// server: no external script, style sheet, image or font.
    #[test]
    fn the_page_is_self_contained() {
        let page = super::PAGE.as_str();
        assert!(page.contains("var uPlot="), "uPlot inlined");
        assert!(page.contains(".uplot"), "its style sheet inlined");
        assert!(
            page.contains("Copyright (c) 2022 Leon Sorokin"),
            "its license kept"
        );
        assert!(!page.contains("/*{uplot."), "every placeholder filled");
        assert!(
            page.contains("var uPlot=function"),
            "the script follows the license"
        );
        let external = [
            " src=", " href=", "@import", "url(", "<link", "http://", "https://",
        ];
        for external in external {
            assert!(
                !page.contains(external),
                "the page refers outside: {external}"
            );
        }
    }
}
