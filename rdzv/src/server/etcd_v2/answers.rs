//! The answers being sent, over every connection of the etcd v2 door: counted from the moment
//! the store builds one until its body has been handed to the socket (or the client went
//! away), so that the store can refuse a read whose answer would pass the server-wide bound
//! (`Limits::max_answer_bytes`) or the door's memory budget beside them.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

/// Bytes of answers in flight, shared by the door's connections.
#[derive(Debug, Default, Clone)]
pub(super) struct InFlight(Arc<AtomicU64>);

impl InFlight {
    /// Bytes in flight now.
    pub(super) fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts `bytes` until the returned charge is dropped.
    pub(super) fn charge(&self, bytes: u64) -> Charge {
        self.0.fetch_add(bytes, Ordering::Relaxed);
        Charge {
            in_flight: self.clone(),
            bytes,
        }
    }
}

/// Bytes counted in flight until dropped.
#[derive(Debug)]
pub(super) struct Charge {
    in_flight: InFlight,
    bytes: u64,
}

impl Charge {
    /// Bytes counted.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Counts `bytes` instead (the JSON's real size once it is built).
    pub(super) fn resize(&mut self, bytes: u64) {
        let counter = &self.in_flight.0;
        counter.fetch_add(bytes, Ordering::Relaxed);
        sub(counter, self.bytes);
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        sub(&self.in_flight.0, self.bytes);
    }
}

fn sub(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// Most bytes handed to hyper at once: it asks for the next piece only once it has room, so
/// the charge lasts while the client has not read most of the answer.
const PIECE: usize = 64 << 10;

/// An answer's body, in pieces, that keeps its charge until the last piece is taken or the
/// body is dropped.
pub(super) struct ChargedBody {
    rest: Bytes,
    charge: Option<Charge>,
}

impl ChargedBody {
    pub(super) fn new(body: Bytes, charge: Charge) -> Self {
        Self {
            rest: body,
            charge: Some(charge),
        }
    }
}

impl HttpBody for ChargedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            this.charge = None;
            return Poll::Ready(None);
        }
        let n = this.rest.len().min(PIECE);
        Poll::Ready(Some(Ok(Frame::data(this.rest.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    /// Exact, so the answer keeps its `Content-Length` as etcd sends it.
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[test]
    fn a_body_is_counted_until_its_last_piece_is_taken_or_it_is_dropped() {
        let in_flight = InFlight::default();
        let mut charge = in_flight.charge(10);
        charge.resize(200 << 10);
        assert_eq!(in_flight.bytes(), 200 << 10);
        let mut body = ChargedBody::new(Bytes::from(vec![b'x'; 200 << 10]), charge);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut got = 0;
        rt.block_on(async {
            for _ in 0..4 {
                got += body
                    .frame()
                    .await
                    .unwrap()
                    .unwrap()
                    .into_data()
                    .unwrap()
                    .len();
                assert_eq!(in_flight.bytes(), 200 << 10, "counted while pieces remain");
            }
            assert!(body.frame().await.is_none());
        });
        assert_eq!(got, 200 << 10);
        assert_eq!(in_flight.bytes(), 0);
        let body = ChargedBody::new(Bytes::from_static(b"x"), in_flight.charge(5));
        assert_eq!(in_flight.bytes(), 5);
        drop(body);
        assert_eq!(in_flight.bytes(), 0, "a client that went away");
    }
}
