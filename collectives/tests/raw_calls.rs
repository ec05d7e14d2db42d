//! The byte-level call surface (`Call`, `RawBuf`, `Communicator::run` / `submit`): what the
//! Python binding and the C ABI use. Bad buffers are refused with `InvalidArgument` before
//! anything is sent and the communicator stays usable; overlapping in/out buffers work; async
//! calls keep submission order; errors carry stable codes; a forked child is refused.

mod common;

use std::time::Duration;

use common::on_ranks;
use dtcomm::{
    Call, Collective, CommError, Communicator, DType, ErrorCode, Options, RawBuf, ReduceOp,
};

fn group(world: usize) -> Vec<Communicator> {
    Communicator::in_memory(
        world,
        Options {
            timeout: Some(Duration::from_secs(20)),
            ..Options::default()
        },
    )
    .unwrap()
}

fn invalid(r: Result<(), CommError>, needle: &str) {
    match r {
        Err(e @ CommError::InvalidArgument { .. }) => {
            assert_eq!(e.code(), ErrorCode::InvalidArgument);
            assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
        }
        other => panic!("expected InvalidArgument naming {needle:?}, got {other:?}"),
    }
}

#[test]
fn bad_buffers_are_refused_before_anything_is_sent_and_the_communicator_stays_usable() {
    let comms = group(2);
    on_ranks(&comms, |c| {
        let ar = || Call::new(Collective::AllReduce { op: ReduceOp::Sum });
        let run = |call: Call| unsafe { c.run(&call) };
        invalid(run(ar()), "needs a recv buffer");
        invalid(
            run(ar().recv(RawBuf::host(std::ptr::null_mut(), 4, DType::F32))),
            "null pointer",
        );
        let mut v = vec![0u64; 4];
        let odd = unsafe { v.as_mut_ptr().cast::<u8>().add(1) };
        invalid(
            run(ar().recv(RawBuf::host(odd, 2, DType::F32))),
            "not aligned",
        );
        let huge = RawBuf::host(v.as_mut_ptr().cast(), usize::MAX / 2, DType::F64);
        invalid(run(ar().recv(huge)), "overflow");
        let mut f = [1f32; 4];
        let mut d = [1f64; 4];
        invalid(
            run(ar()
                .send(RawBuf::of_mut(&mut d))
                .recv(RawBuf::of_mut(&mut f))),
            "send is double but recv is float",
        );
        invalid(
            run(Call::new(Collective::Broadcast { root: 9 }).recv(RawBuf::of_mut(&mut f))),
            "root 9",
        );
        invalid(
            run(Call::new(Collective::AllGather {
                counts: Some(vec![1, 1]),
            })
            .send(RawBuf::of_mut(&mut f[..1]))
            .recv(RawBuf::of_mut(&mut d[..2]))),
            "send is float but recv is double",
        );
        invalid(
            run(Call::new(Collective::AllGather {
                counts: Some(vec![1, usize::MAX]),
            })
            .send(RawBuf::of_mut(&mut f[..1]))
            .recv(RawBuf::of_mut(&mut [0f32; 2]))),
            "summing to 2",
        );
        invalid(
            run(Call::new(Collective::Send { peer: c.rank() }).send(RawBuf::of_mut(&mut f))),
            "peer",
        );
        invalid(
            run(ar().recv(RawBuf::of_mut(&mut f)).deadline(Duration::ZERO)),
            "deadline",
        );
        // Nothing was sent, nothing failed: the next call works on every rank.
        let mut x = [c.rank() as f32 + 1.0; 3];
        run(ar().recv(RawBuf::of_mut(&mut x))).unwrap();
        assert_eq!(x, [3.0; 3]);
        assert!(c.failure().is_none());
    });
}

#[test]
fn overlapping_send_and_recv_give_the_same_result_as_separate_buffers() {
    let comms = group(3);
    on_ranks(&comms, |c| {
        let (rank, world) = (c.rank(), c.world());
        // In-place all_gather: this rank's block of recv is its send.
        let mut out = vec![-1i32; 2 * world];
        out[2 * rank] = rank as i32 * 10;
        out[2 * rank + 1] = rank as i32 * 10 + 1;
        let send = unsafe { RawBuf::of_mut(&mut out).ptr().add(8 * rank) };
        let call = Call::new(Collective::AllGather { counts: None })
            .send(RawBuf::host(send, 2, DType::I32))
            .recv(RawBuf::of_mut(&mut out));
        unsafe { c.run(&call) }.unwrap();
        assert_eq!(out, vec![0, 1, 10, 11, 20, 21]);
        // Out of place all_reduce where send is the same memory as recv.
        let mut v = vec![rank as f64; 5];
        let b = RawBuf::of_mut(&mut v);
        unsafe {
            c.run(
                &Call::new(Collective::AllReduce { op: ReduceOp::Avg })
                    .send(b)
                    .recv(b),
            )
        }
        .unwrap();
        assert_eq!(v, vec![1.0; 5]);
        // Out-of-place broadcast from the root's send into everyone's recv.
        let src = [7u8, 8, 9];
        let mut dst = [0u8; 3];
        let mut call = Call::new(Collective::Broadcast { root: 1 }).recv(RawBuf::of_mut(&mut dst));
        if rank == 1 {
            call = call.send(RawBuf::of(&src));
        }
        unsafe { c.run(&call) }.unwrap();
        assert_eq!(dst, src);
        // Out-of-place reduce: only the root passes a recv; inputs are left alone.
        let input = [rank as i64 + 1; 4];
        let mut res = [0i64; 4];
        let mut call = Call::new(Collective::Reduce {
            op: ReduceOp::Prod,
            root: 2,
        })
        .send(RawBuf::of(&input));
        if rank == 2 {
            call = call.recv(RawBuf::of_mut(&mut res));
        }
        unsafe { c.run(&call) }.unwrap();
        assert_eq!(input, [rank as i64 + 1; 4]);
        if rank == 2 {
            assert_eq!(res, [6; 4]);
        }
    });
}

#[test]
fn submitted_calls_complete_in_order_with_their_callbacks() {
    let comms = group(2);
    on_ranks(&comms, |c| {
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut bufs: Vec<Vec<f32>> = (0..4).map(|k| vec![k as f32; 100 * (k + 1)]).collect();
        let works: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .map(|(k, b)| {
                let o = order.clone();
                let call =
                    Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(RawBuf::of_mut(b));
                unsafe {
                    c.submit_with(
                        call,
                        None,
                        Some(Box::new(move |r| {
                            assert!(r.is_ok());
                            o.lock().unwrap().push(k)
                        })),
                    )
                }
            })
            .collect();
        for w in &works {
            w.wait().unwrap();
            assert!(w.test());
            assert!(matches!(w.result(), Some(Ok(()))));
            // A second wait returns the same result.
            w.wait().unwrap();
        }
        // Callbacks run right after their call reports completion, in submission order.
        let t0 = std::time::Instant::now();
        while order.lock().unwrap().len() < 4 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        for (k, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|x| *x == 2.0 * k as f32));
        }
        // A submitted call with bad arguments is a Work that already failed.
        let w = unsafe { c.submit(Call::new(Collective::Recv { peer: 7 })) };
        assert!(w.test());
        assert_eq!(w.wait().unwrap_err().code(), ErrorCode::InvalidArgument);
    });
}

#[test]
fn errors_have_stable_codes() {
    assert_eq!(ErrorCode::InvalidArgument as i32, 1);
    assert_eq!(ErrorCode::Timeout as i32, 2);
    assert_eq!(ErrorCode::PeerLost as i32, 3);
    assert_eq!(ErrorCode::Mismatch as i32, 5);
    assert_eq!(ErrorCode::Shutdown as i32, 9);
    // A mismatch names both ranks and both calls, on both ranks, with its code.
    let comms = group(2);
    let errs = on_ranks(&comms, |c| {
        let mut v = vec![0f32; 3 + c.rank()];
        c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err()
    });
    for e in &errs {
        assert_eq!(e.code(), ErrorCode::Mismatch, "{e}");
        let s = e.to_string();
        assert!(s.contains("rank 0") && s.contains("rank 1"), "{s}");
        assert!(s.contains("float x 3") && s.contains("float x 4"), "{s}");
    }
    // The communicator is failed now: later calls say so, with the Failed code.
    let e = on_ranks(&comms, |c| c.barrier().unwrap_err());
    assert_eq!(e[0].code(), ErrorCode::Failed);
    assert_eq!(e[0].root_cause().code(), ErrorCode::Mismatch);
}

#[test]
fn calls_after_shutdown_are_refused() {
    let comms = group(1);
    comms[0].shutdown();
    let e = comms[0].barrier().unwrap_err();
    assert_eq!(e.code(), ErrorCode::Shutdown, "{e}");
    assert!(e.to_string().contains("barrier"), "{e}");
}

#[test]
fn a_forked_child_gets_an_error_instead_of_a_hang() {
    let comms = group(1);
    comms[0].barrier().unwrap();
    // SAFETY: the child only runs dtcomm's refusal path and exits without unwinding.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match comms[0].barrier() {
            Err(CommError::Shutdown { detail, .. }) if detail.contains("fork") => 0,
            _ => 1,
        };
        drop(comms);
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    // The parent's communicator is untouched.
    comms[0].barrier().unwrap();
}
