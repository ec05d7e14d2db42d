//! `POST /replica/{id}/kill` (`?job=KEY` for a job other than the default): calls
//! `torchft.ManagerService/Kill` with `KillRequest{msg}` on the address that replica gave in
//! its job's last quorum, as torchft's Lighthouse does; the replica group's Manager then
//! exits its process. One HTTP/2 connection per call, no TLS (torchft's Managers have none).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{Request, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;

use super::LighthouseDoor;
use super::wire::KillRequest;

/// The whole call (connect, request, answer).
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// What the Manager is told (its log shows it).
const KILL_MESSAGE: &str = "killed from the dt-rdzv Lighthouse status page";

pub(crate) async fn kill(
    State(door): State<Arc<LighthouseDoor>>,
    Path(replica_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let job = q.get("job").cloned().unwrap_or_default();
    let Some(address) = door
        .driver
        .read(|g| g.core.member_address(&job, &replica_id))
    else {
        return (
            StatusCode::NOT_FOUND,
            format!("no replica {replica_id:?} in the last quorum of job {job:?}\n"),
        )
            .into_response();
    };
    tracing::warn!(job = ?job, replica = ?replica_id, %address, "torchft kill asked");
    match tokio::time::timeout(KILL_TIMEOUT, call_kill(&address)).await {
        Ok(Ok(Killed::Answered)) => (
            StatusCode::OK,
            format!("asked {replica_id} ({address}) to exit\n"),
        )
            .into_response(),
        Ok(Ok(Killed::ClosedUnanswered(e))) => (
            StatusCode::ACCEPTED,
            format!(
                "sent Kill to {replica_id} ({address}); its Manager closed the connection without an answer, as it does when it exits ({e})\n"
            ),
        )
            .into_response(),
        Ok(Err(e)) => (
            StatusCode::BAD_GATEWAY,
            format!("ManagerService/Kill on {address} failed: {e}\n"),
        )
            .into_response(),
        Err(_) => (
            StatusCode::GATEWAY_TIMEOUT,
            format!("ManagerService/Kill on {address}: no answer within {KILL_TIMEOUT:?}\n"),
        )
            .into_response(),
    }
}

/// How a Kill call ended, short of an error.
enum Killed {
    /// The Manager answered OK.
    Answered,
    /// The request went out on an open connection, which then closed without an answer:
    /// torchft's Manager exits the process on Kill before it replies.
    ClosedUnanswered(String),
}

/// One unary gRPC call of `torchft.ManagerService/Kill` on `address` (`http://host:port`).
async fn call_kill(address: &str) -> Result<Killed, String> {
    let uri: Uri = if address.contains("://") {
        address.parse()
    } else {
        format!("http://{address}").parse()
    }
    .map_err(|e| format!("bad address: {e}"))?;
    if uri.scheme_str().is_some_and(|s| s != "http") {
        return Err("only plaintext http:// Manager addresses are supported".into());
    }
    let authority = uri.authority().ok_or("the address has no host")?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    let msg = KillRequest {
        msg: KILL_MESSAGE.into(),
    }
    .encode_to_vec();
    let mut frame = BytesMut::with_capacity(5 + msg.len());
    frame.put_u8(0);
    frame.put_u32(msg.len() as u32);
    frame.put_slice(&msg);
    let req = Request::post(format!("http://{authority}/torchft.ManagerService/Kill"))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .body(Body::from(Bytes::from(frame)))
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = match send.send_request(req).await {
            Ok(r) => r,
            Err(e) => return Ok(Killed::ClosedUnanswered(e.to_string())),
        };
        if !resp.status().is_success() {
            return Err(format!("HTTP status {}", resp.status()));
        }
        let head = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let trailers = body.trailers().cloned().unwrap_or_default();
        let code = trailers
            .get("grpc-status")
            .or_else(|| head.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match code {
            "0" => Ok(Killed::Answered),
            "" => Ok(Killed::ClosedUnanswered("no grpc-status".into())),
            c => {
                let m = trailers
                    .get("grpc-message")
                    .or_else(|| head.get("grpc-message"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                Err(format!("grpc-status {c} {m}"))
            }
        }
    }
    .await;
    conn.abort();
    result
}
