//! The HTTP port (29402): `/healthz`, `/metrics` (Prometheus text format) and `/v1/jobs`
//! (JSON; needs `Authorization: Bearer <token>`). A minimal HTTP/1.1 responder: one request
//! per connection, GET only, heads up to 8 KiB, deadlines on every read and write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dt_rdzv_proto::rendezvous::Scope;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::core::Core;
use super::json::job_json;
use super::rendezvous::RdzvCore;

const MAX_HEAD: usize = 8 * 1024;
const DEADLINE: Duration = Duration::from_secs(5);

/// What `/metrics` and `/v1/jobs` read.
pub(crate) struct HttpState {
    pub(crate) store: Option<Arc<Core>>,
    pub(crate) rdzv: Arc<RdzvCore>,
}

pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<HttpState>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let state = state.clone();
                    tokio::spawn(async move {
                        if let Err(e) = tokio::time::timeout(DEADLINE * 2, serve(stream, peer, &state)).await {
                            tracing::debug!(%peer, error = %e, "HTTP request timed out");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
}

async fn serve(mut stream: TcpStream, peer: SocketAddr, state: &HttpState) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if head.len() > MAX_HEAD {
            let _ = respond(&mut stream, 431, "text/plain", b"request head too large\n").await;
            return;
        }
        match tokio::time::timeout(DEADLINE, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => head.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&head[..end]);
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let auth = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_string());
    let (status, ctype, body) = route(method, target, auth.as_deref(), state);
    tracing::debug!(%peer, method, target, status, "HTTP request");
    let _ = respond(&mut stream, status, ctype, &body).await;
}

fn route(
    method: &str,
    target: &str,
    auth: Option<&str>,
    state: &HttpState,
) -> (u16, &'static str, Vec<u8>) {
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return (405, "text/plain", b"GET only\n".to_vec());
    }
    match path {
        "/healthz" => (200, "text/plain", b"ok\n".to_vec()),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4",
            super::metrics::render(state.store.as_deref(), &state.rdzv).into_bytes(),
        ),
        "/v1/jobs" => jobs(None, auth, state),
        p if p.starts_with("/v1/jobs/") && p.len() > "/v1/jobs/".len() => {
            jobs(Some(&p["/v1/jobs/".len()..]), auth, state)
        }
        _ => (
            404,
            "text/plain",
            b"not found: try /healthz, /metrics, /v1/jobs\n".to_vec(),
        ),
    }
}

fn jobs(job: Option<&str>, auth: Option<&str>, state: &HttpState) -> (u16, &'static str, Vec<u8>) {
    let token = auth.and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("");
    let scope = job.map_or(Scope::Server, Scope::Job);
    if !state.rdzv.authorized(scope, token) {
        tracing::warn!(?job, "HTTP /v1/jobs without a valid token refused");
        return (
            401,
            "application/json",
            br#"{"error":"missing or wrong token: send Authorization: Bearer <token>"}"#.to_vec(),
        );
    }
    match state.rdzv.status(job) {
        Ok(list) => {
            let v: Vec<serde_json::Value> = list.iter().map(job_json).collect();
            let body = match job {
                Some(_) => serde_json::to_vec_pretty(&v[0]),
                None => serde_json::to_vec_pretty(&serde_json::json!({ "jobs": v })),
            };
            (200, "application/json", body.unwrap_or_default())
        }
        Err(e) => (
            404,
            "application/json",
            serde_json::json!({ "error": e.to_string() })
                .to_string()
                .into_bytes(),
        ),
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tokio::time::timeout(DEADLINE, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "write deadline"))?
}
