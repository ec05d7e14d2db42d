//! The torchft Lighthouse door (`--torchft-port`, off by default): torchft's
//! `LighthouseService` (gRPC over plaintext HTTP/2) for an unmodified torchft `Manager` or
//! `LighthouseClient`, and on the same port HTTP/1 `GET /status` (HTML), `GET /status.json`
//! and `POST /replica/{id}/kill`. The sans-IO [`Lighthouse`] does the work behind the
//! server's one [`Driver`], which runs its quorum tick; this module is hyper (HTTP/1 and h2c
//! on one port) and axum around it:
//!
//! * `wire`: the messages, hand-written prost structs (no protoc);
//! * `grpc`: `Quorum` (a long poll, bounded by the call's `grpc-timeout`) and `Heartbeat`;
//! * `status`: the status pages;
//! * `kill`: `ManagerService/Kill` on a member's address;
//! * `metrics`: `GET /metrics` (Prometheus): each job's quorum, replicas and waiting calls,
//!   quorums issued and departures by reason;
//! * `member_watch`: `GET /v1/torchft/watch`, a long poll that answers when a member of the
//!   watcher's quorum stops heartbeating (what `dtcomm.torchft` aborts its collectives on).
//!
//! Several jobs share the port: a call's job is its `x-dtcomm-job` metadata, else `room-id`
//! (torchft PR #189's name), else the default job.
//!
//! Quorum ids start above the Unix time in milliseconds when the server started, so that a
//! restarted server never reissues an id. With several servers on a backend one of them holds
//! the door and the others relay to it (`ha/lighthouse.rs`).

mod grpc;
mod kill;
mod member_watch;
mod metrics;
mod status;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use dt_rdzv_proto::torchft::{CallId, Lighthouse, LighthouseConfig, Output, Quorum, Refusal};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use super::admission::{Gate, stop_or_evicted};
use super::driver::{Driver, Route};
use super::ha::lighthouse::{Admission, SharedLighthouse};
use super::ha::owner::Owners;

/// Connections open at once.
const MAX_CONNECTIONS: usize = 4096;
/// Calls open at once on one HTTP/2 connection.
const MAX_STREAMS: u32 = 256;
/// Largest request head (HTTP/1) or header list (HTTP/2).
const MAX_HEAD: usize = 16 << 10;
/// An HTTP/1 request head must arrive within this (idle keep-alive time counts too).
const HEAD_DEADLINE: Duration = Duration::from_secs(60);

/// Where the Lighthouse's outputs go: the waiting quorum calls, the heartbeat just fed.
#[derive(Default)]
pub(crate) struct Routes {
    quorums: HashMap<CallId, oneshot::Sender<Result<Quorum, Refusal>>>,
    heartbeat: Option<Result<(), Refusal>>,
    /// Where issued quorum ids are recorded for the group (with `--backend`).
    issued: Option<mpsc::UnboundedSender<i64>>,
    /// What `/metrics` counts.
    counters: metrics::Counters,
}

impl Route<Output> for Routes {
    fn route(&mut self, output: Output) {
        match output {
            Output::Quorum { call, result } => {
                if let Some(tx) = self.quorums.remove(&call) {
                    let _ = tx.send(result);
                }
            }
            Output::Heartbeat { result, .. } => self.heartbeat = Some(result),
            Output::Issued {
                job,
                quorum,
                reason,
                left,
                changed,
            } => {
                if let Some(tx) = &self.issued {
                    let _ = tx.send(quorum.quorum_id);
                }
                if changed {
                    self.counters.quorums += 1;
                }
                for d in &left {
                    self.counters.left(&d.reason);
                }
                let ids: Vec<&str> = quorum
                    .participants
                    .iter()
                    .map(|m| m.replica_id.as_str())
                    .collect();
                if changed {
                    tracing::info!(job = ?job, quorum_id = quorum.quorum_id,
                        participants = ?ids, %reason, "torchft quorum issued");
                } else {
                    tracing::debug!(job = ?job, quorum_id = quorum.quorum_id,
                        participants = ?ids, %reason, "torchft quorum issued again");
                }
                for d in left {
                    tracing::info!(job = ?job, replica = ?d.replica_id, quorum_id = d.quorum_id,
                        reason = %d.reason, "torchft replica left the quorum");
                }
            }
        }
    }
}

/// The door's state, shared by its connections.
pub(crate) struct LighthouseDoor {
    driver: Driver<Lighthouse, Routes>,
    next_call: AtomicU64,
}

impl LighthouseDoor {
    pub(crate) fn new(config: LighthouseConfig) -> Arc<Self> {
        Arc::new(Self {
            driver: Driver::new(Lighthouse::new(config), Routes::default()),
            next_call: AtomicU64::new(1),
        })
    }

    /// Makes every quorum id from now on greater than `quorum_id`.
    fn restore_floor(&self, quorum_id: i64) {
        self.driver
            .with(|d| d.core.restore_floor(std::time::Instant::now(), quorum_id));
    }

    fn call_id(&self) -> CallId {
        self.next_call.fetch_add(1, Ordering::Relaxed)
    }

    fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(grpc::QUORUM_PATH, post(grpc::quorum))
            .route(grpc::HEARTBEAT_PATH, post(grpc::heartbeat))
            .route("/", get(status::html))
            .route("/status", get(status::html))
            .route("/status.json", get(status::json))
            .route("/metrics", get(metrics::metrics))
            .route("/replica/{replica_id}/kill", post(kill::kill))
            .route("/v1/torchft/watch", get(member_watch::watch))
            .fallback(grpc::fallback)
            .with_state(self.clone())
    }
}

/// Serves the door on `listener` until `stop` turns true: HTTP/1 and HTTP/2 (prior
/// knowledge, as gRPC clients speak it) on each connection. With `owners` (a group of
/// servers on a backend) only the door's holder serves; the others relay to it.
pub(crate) async fn run(
    listener: TcpListener,
    door: Arc<LighthouseDoor>,
    owners: Option<Arc<Owners>>,
    mut stop: watch::Receiver<bool>,
) {
    let timer = {
        let (door, stop) = (door.clone(), stop.clone());
        tokio::spawn(async move { door.driver.run_timers(stop).await })
    };
    let shared = owners.map(|o| {
        let shared = Arc::new(SharedLighthouse::new(o));
        let (tx, rx) = mpsc::unbounded_channel();
        door.driver.with(|d| d.routes.issued = Some(tx));
        tokio::spawn(shared.clone().record(rx, stop.clone()));
        shared
    });
    let mut next_id: u64 = 0;
    let gate = Gate::new("torchft", MAX_CONNECTIONS);
    let app = door.router();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(mut slot) = gate.admit(peer) else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let app = app.clone();
                    let stop = stop.clone();
                    let (door, shared) = (door.clone(), shared.clone());
                    next_id += 1;
                    let id = next_id;
                    tokio::spawn(async move {
                        if !slot.first_bytes(&stream).await {
                            return;
                        }
                        // Ends as at shutdown if the gate gives its slot to another host.
                        let (mut stop, ended) = stop_or_evicted(stop, &mut slot);
                        let serve = async move {
                            match shared {
                                None => serve_connection(stream, peer, app, &mut stop, None).await,
                                Some(shared) => {
                                    let restore = |q| door.restore_floor(q);
                                    let admitted =
                                        shared.admit(id, stream, peer, stop.clone(), restore).await;
                                    if let Admission::Serve(stream, lost) = admitted {
                                        serve_connection(stream, peer, app, &mut stop, Some(lost))
                                            .await;
                                    }
                                }
                            }
                        };
                        tokio::select! {
                            _ = serve => {}
                            _ = ended => unreachable!("pends once it has told"),
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "torchft accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
    let _ = timer.await;
}

/// Serves one connection until it ends, the server stops, or `lost` changes (this server no
/// longer holds the group's door).
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    stop: &mut watch::Receiver<bool>,
    lost: Option<watch::Receiver<u64>>,
) {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .max_buf_size(MAX_HEAD.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEAD as u32)
        // Pings a silent peer so a vanished client's calls end (torchft's client pings
        // every 60 s too).
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let lost = async {
        match lost {
            Some(mut l) => {
                let _ = l.changed().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "torchft connection ended with an error");
            }
        }
        _ = stop.changed() => {}
        _ = lost => {}
    }
}
