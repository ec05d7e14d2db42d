//! A checked call lowered once, for whichever host backend runs it: the description its frames
//! and records carry, the sequence counter it takes its number from, the bytes the algorithm
//! works in and the bytes it reads, the in-place copy done before it (a root's input onto its
//! output), and what is left for after (`Avg`'s division by the world). The backends run a
//! [`Lowered`] and look at nothing else of the call but its [`Collective`] (for roots, counts
//! and the reduction).
//!
//! | collective | `work` | `input` | before | after |
//! | --- | --- | --- | --- | --- |
//! | allreduce | recv | send if a separate buffer (copied if it overlaps recv), else empty | | divide (`Avg`) |
//! | broadcast | recv | empty | the root copies send onto recv | |
//! | reduce, root | recv | empty | copies send onto recv | divide (`Avg`) |
//! | reduce, others | a copy of send (their buffers stay as they were) | empty | | |
//! | allgather(v), all-to-all(v), reduce-scatter | recv | send (copied if it overlaps recv) | | divide (`Avg`, reduce-scatter) |
//! | gather | root: recv; others: empty | root: send (copied if it overlaps); others: send | | |
//! | scatter | recv | root: send (copied if it overlaps); others: empty | | |
//! | send | empty | send | | |
//! | recv (from one or any) | recv | empty | | |
//! | barrier | empty | empty | | |

use std::time::Duration;

use super::buffers::{as_bytes, bytes_mut, copy_over, input, staged};
use crate::call::{Call, CallDesc, Collective};
use crate::dtype::DType;
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;

/// Which sequence counter a call takes its number from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SeqKind {
    /// The communicator's collective counter.
    Collective,
    /// The counter of sends to this peer.
    SendTo(usize),
    /// The counter of receives from this peer.
    RecvFrom(usize),
    /// A receive from whichever peer sends first: the counter of that peer, known once its
    /// frame is there (the links backend probes for it).
    RecvAny,
}

/// What is left for after the backend ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Post {
    /// Nothing.
    Nothing,
    /// `Avg`: the result divided by the world's size.
    Divide,
}

/// The copies a lowered call's views may borrow (an input that overlaps the output, a
/// non-root's reduce buffer).
#[derive(Default)]
pub(super) struct Copies {
    input: Vec<u64>,
    scratch: Vec<u64>,
}

/// See the module docs.
pub(super) struct Lowered<'a> {
    /// The collective (roots, per-rank counts, the reduction).
    pub collective: &'a Collective,
    /// What the frames and records carry; `seq` is set when the call takes its number.
    pub desc: CallDesc,
    /// Which counter `desc.seq` comes from.
    pub seq: SeqKind,
    /// The bytes the algorithm works in (where the result lands).
    pub work: &'a mut [u8],
    /// The bytes it reads besides `work`.
    pub input: &'a [u8],
    /// What is left for after.
    pub post: Post,
    /// The call's deadline.
    pub timeout: Duration,
}

fn divide_if(op: ReduceOp) -> Post {
    if op == ReduceOp::Avg {
        Post::Divide
    } else {
        Post::Nothing
    }
}

impl<'a> Lowered<'a> {
    /// Lowers `call` for `rank` (see the module docs); `timeout` unless the call has its own
    /// deadline. The root's copy onto its output happens here.
    ///
    /// # Safety
    /// `call` passed `Inner::check` and its buffers are valid as `Communicator::run` requires.
    pub(super) unsafe fn new(
        call: &'a Call,
        rank: usize,
        timeout: Duration,
        copies: &'a mut Copies,
    ) -> Lowered<'a> {
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let mut desc = call.desc(0);
        let mut seq = SeqKind::Collective;
        let mut post = Post::Nothing;
        let Copies {
            input: copy,
            scratch,
        } = copies;
        // SAFETY: the buffers passed `check` and are valid per the caller's contract (each
        // view below is of one of them or of a copy in `copies`); `input` copies a send that
        // overlaps the output.
        let (work, input): (&'a mut [u8], &'a [u8]) = unsafe {
            match &call.collective {
                Collective::AllReduce { op } => {
                    post = divide_if(*op);
                    let i = match (send, recv) {
                        (Some(s), Some(r)) if s.ptr() != r.ptr() => input(send, recv, copy),
                        _ => &[],
                    };
                    (bytes_mut(recv), i)
                }
                Collective::Broadcast { root } => {
                    if let (Some(s), Some(r), true) = (send, recv, rank == *root) {
                        copy_over(s, r);
                    }
                    (bytes_mut(recv), &[])
                }
                Collective::Reduce { op, root } => {
                    let from = send.or(recv).expect("checked");
                    if rank == *root {
                        copy_over(from, recv.expect("checked"));
                        post = divide_if(*op);
                        (bytes_mut(recv), &[])
                    } else {
                        *scratch = staged(Some(from));
                        let n = from.count() * from.dtype().size();
                        (&mut as_bytes(scratch)[..n], &[])
                    }
                }
                Collective::ReduceScatter { op } => {
                    post = divide_if(*op);
                    desc.count = send.map_or(0, |s| s.count() as u64);
                    (bytes_mut(recv), input(send, recv, copy))
                }
                Collective::AllGather { .. } => (bytes_mut(recv), input(send, recv, copy)),
                Collective::AllToAll {
                    send_counts,
                    recv_counts,
                } => {
                    // Headers carry the count only for equal blocks; with per-peer counts a
                    // rank whose counts disagree with its peer's fails on the frame length.
                    desc.count = match (send_counts, recv_counts) {
                        (None, None) => send.map_or(0, |s| s.count() as u64),
                        _ => 0,
                    };
                    (bytes_mut(recv), input(send, recv, copy))
                }
                Collective::Gather { root } if rank == *root => {
                    (bytes_mut(recv), input(send, recv, copy))
                }
                Collective::Gather { .. } => (&mut [], bytes_mut(send)),
                Collective::Scatter { root } if rank == *root => {
                    (bytes_mut(recv), input(send, recv, copy))
                }
                Collective::Scatter { .. } => (bytes_mut(recv), &[]),
                Collective::Barrier => (&mut [], &[]),
                Collective::Send { peer } => {
                    seq = SeqKind::SendTo(*peer);
                    (&mut [], bytes_mut(send))
                }
                Collective::Recv { peer } => {
                    seq = SeqKind::RecvFrom(*peer);
                    (bytes_mut(recv), &[])
                }
                Collective::RecvAny { .. } => {
                    seq = SeqKind::RecvAny;
                    (bytes_mut(recv), &[])
                }
            }
        };
        Lowered {
            collective: &call.collective,
            desc,
            seq,
            work,
            input,
            post,
            timeout: call.deadline.unwrap_or(timeout),
        }
    }

    /// The element type.
    pub(super) fn dtype(&self) -> DType {
        self.desc.dtype
    }

    /// The input, if the call has one apart from its output.
    pub(super) fn input(&self) -> Option<&'a [u8]> {
        (!self.input.is_empty()).then_some(self.input)
    }

    /// Does what is left for after the backend ran (`world`: the communicator's size).
    pub(super) fn finish(self, world: usize) {
        if self.post == Post::Divide {
            divide_bytes(self.desc.dtype, self.work, world);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::RawBuf;

    fn buf(v: &mut [f32]) -> RawBuf {
        RawBuf::host(v.as_mut_ptr().cast(), v.len(), DType::F32)
    }

    #[test]
    fn a_non_root_reduces_a_copy_and_a_root_its_output_after_the_copy() {
        let (mut s, mut r) = (vec![1.0f32, 2.0], vec![0.0f32; 2]);
        let call = Call::new(Collective::Reduce {
            op: ReduceOp::Avg,
            root: 0,
        })
        .send(buf(&mut s))
        .recv(buf(&mut r));
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 1, Duration::from_secs(1), &mut copies) };
        assert_eq!(l.post, Post::Nothing);
        assert_ne!(l.work.as_ptr(), r.as_ptr().cast());
        assert_eq!(l.work.len(), 8);
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
        assert_eq!(
            (l.post, l.work.as_ptr()),
            (Post::Divide, r.as_ptr().cast::<u8>())
        );
        l.finish(2);
        assert_eq!(r, [0.5, 1.0]);
    }

    #[test]
    fn an_overlapping_input_is_copied_and_a_separate_one_read_in_place() {
        let mut v = [1.0f32, 2.0, 3.0, 4.0];
        let (s, r) = (buf(&mut v[..2]), buf(&mut v[1..3]));
        let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum })
            .send(s)
            .recv(r);
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
        assert_ne!(l.input.as_ptr(), s.ptr().cast_const());
        assert_eq!(l.input().map(<[u8]>::len), Some(8));
        let mut other = vec![9.0f32, 9.0];
        let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum })
            .send(buf(&mut other))
            .recv(r);
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
        assert_eq!(l.input.as_ptr(), other.as_ptr().cast());
        let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(r);
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
        assert_eq!(l.input(), None);
    }

    #[test]
    fn point_to_point_takes_the_peers_counter_and_a_broadcast_root_copies_first() {
        let (mut s, mut r) = (vec![5.0f32], vec![0.0f32]);
        for (c, kind) in [
            (Collective::Send { peer: 3 }, SeqKind::SendTo(3)),
            (Collective::Recv { peer: 2 }, SeqKind::RecvFrom(2)),
        ] {
            let call = Call::new(c).send(buf(&mut s)).recv(buf(&mut r));
            let mut copies = Copies::default();
            // SAFETY: valid buffers.
            let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
            assert_eq!(l.seq, kind);
        }
        let call = Call::new(Collective::Broadcast { root: 0 })
            .send(buf(&mut s))
            .recv(buf(&mut r));
        let mut copies = Copies::default();
        // SAFETY: valid buffers.
        let l = unsafe { Lowered::new(&call, 0, Duration::from_secs(1), &mut copies) };
        assert_eq!((l.seq, l.input()), (SeqKind::Collective, None));
        assert_eq!(r, [5.0]);
    }
}
