//! A request's body, read piece by piece: at most [`MAX_BODY`] bytes, within
//! [`BODY_DEADLINE`], and charged as it arrives to the etcd door's share of the server's budget
//! for partly received frames (`memory.rs`), so that clients sending bodies slowly cannot make
//! the server hold more than that share, however many connections they open (4096 connections
//! of 6 MiB each would be 24 GiB). The handler checks the request's credentials before any of
//! its body is read.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use http_body_util::BodyExt;

use super::answers::{Charge, InFlight};
use crate::server::memory::{Door, ServerMemory};

/// Largest request body (a 1.5 MiB value, URL-encoded).
pub(super) const MAX_BODY: usize = 6 << 20;

/// A body must have arrived whole this long after its head: `python-etcd` and torch's etcd
/// rendezvous send theirs at once, so only a client trickling one waits this out.
pub(super) const BODY_DEADLINE: Duration = Duration::from_secs(30);

/// Why a request's body was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    /// It is, or says it is, larger than [`MAX_BODY`].
    #[error("the request body is larger than {MAX_BODY} bytes (a 1.5 MiB value, URL-encoded)")]
    TooLarge,
    /// The door's share of the budget for partly received frames is spent.
    #[error("{0}")]
    Budget(String),
    /// It did not arrive within [`BODY_DEADLINE`].
    #[error("the request body did not arrive within {}s of its head", BODY_DEADLINE.as_secs())]
    Slow,
    /// The connection failed while it arrived.
    #[error("the request body broke off: {0}")]
    Broken(String),
}

impl BodyError {
    /// The HTTP status it is answered with.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Budget(_) => StatusCode::SERVICE_UNAVAILABLE,
            BodyError::Slow => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// What a body may hold before it is charged: hyper's own read buffer is as large, and the
/// door's connections (4096) bound the uncharged part to 64 MiB, so that the small bodies of
/// torch's and `python-etcd`'s requests are read even while strangers' large ones fill the
/// door's share of the budget.
pub(super) const UNCHARGED: usize = 16 << 10;

/// Reads `body` whole (`declared`: its `Content-Length`, if it gave one). The returned charge
/// counts the buffer among the door's partial frames until it is dropped.
pub(super) async fn read(
    mut body: Body,
    declared: Option<u64>,
    frames: &InFlight,
    server: &ServerMemory,
) -> Result<(Bytes, Charge), BodyError> {
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut charge = frames.charge(0);
    let mut buf: Vec<u8> = Vec::new();
    let deadline = tokio::time::Instant::now() + BODY_DEADLINE;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::Slow),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = buf.len() + data.len();
        if len > MAX_BODY {
            return Err(BodyError::TooLarge);
        }
        if len > buf.capacity() {
            // Grown by doubling, and charged for what is allocated (past the first
            // `UNCHARGED` bytes) before it is.
            let cap = len.next_power_of_two().clamp(4 << 10, MAX_BODY);
            let owed = cap.saturating_sub(UNCHARGED) as u64;
            if owed > charge.bytes() {
                server
                    .frame_room(Door::EtcdV2, owed - charge.bytes())
                    .map_err(BodyError::Budget)?;
            }
            buf.reserve_exact(cap - buf.len());
            charge.resize(buf.capacity().saturating_sub(UNCHARGED) as u64);
        }
        buf.extend_from_slice(&data);
    }
    Ok((Bytes::from(buf), charge))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::stream;

    use super::*;

    fn pieces(n: usize, size: usize) -> Body {
        let chunks = (0..n).map(move |_| Ok::<_, Infallible>(Bytes::from(vec![b'a'; size])));
        Body::from_stream(stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_is_charged_while_held_and_released_after() {
        let frames = InFlight::default();
        let server = ServerMemory::new(None);
        let (small, free) = read(pieces(10, 1000), None, &frames, &server)
            .await
            .unwrap();
        assert_eq!(
            (small.len(), frames.bytes()),
            (10_000, 0),
            "small bodies are free"
        );
        drop(free);
        let (bytes, charge) = read(pieces(10, 10_000), None, &frames, &server)
            .await
            .unwrap();
        assert_eq!(bytes.len(), 100_000);
        assert_eq!(frames.bytes(), (128 << 10) - UNCHARGED as u64);
        drop(charge);
        assert_eq!(frames.bytes(), 0);
    }

    #[tokio::test]
    async fn past_the_size_or_the_budget_it_is_refused_and_nothing_stays_charged() {
        let frames = InFlight::default();
        let server = ServerMemory::new(None);
        let e = read(pieces(1, 10), Some(MAX_BODY as u64 + 1), &frames, &server).await;
        assert!(matches!(e, Err(BodyError::TooLarge)));
        let e = read(pieces(7, 1 << 20), None, &frames, &server).await;
        assert!(matches!(e, Err(BodyError::TooLarge)), "no length given");

        // A 64 MiB budget: 16 MiB for partial frames, a quarter of that for the etcd door.
        let server = ServerMemory::new(Some(64 << 20));
        let held = InFlight::default();
        struct Door2(InFlight);
        impl crate::server::memory::Held for Door2 {
            fn held(&self) -> u64 {
                0
            }
            fn frames(&self) -> u64 {
                self.0.bytes()
            }
        }
        server.register(Door::EtcdV2, std::sync::Arc::new(Door2(held.clone())));
        let (_a, kept) = read(pieces(3, 1 << 20), None, &held, &server)
            .await
            .unwrap();
        let e = read(pieces(2, 1 << 20), None, &held, &server).await;
        match e {
            Err(BodyError::Budget(why)) => assert!(why.contains("partly received"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            held.bytes(),
            kept.bytes(),
            "the refused body's charge is gone"
        );
    }
}
