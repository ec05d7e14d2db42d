//! The engine's device path, driven by the in-memory twins of CUDA and NCCL (`dtcomm::device::
//! twin`) with every rank a thread of this process: the ranks agree on NCCL or host staging,
//! calls run on the path agreed (results checked against values computed here), the caller's
//! stream orders the call, and failures (an NCCL set-up or async error on one rank, a rank that
//! never calls, a mismatched call under `DTCOMM_NCCL_CHECK`) fail every rank fast with an
//! error naming the rank, the call and its sequence number.

use std::time::{Duration, Instant};

mod common;
use common::device::{assert_fast, dev, group, quick};

use dtcomm::device::twin::{self, MemGpu, MemNccl};
use dtcomm::device::{CudaMode, DeviceApi, StreamHandle};
use dtcomm::{
    Call, Collective, CommError, Communicator, DType, ErrorCode, Options, RawBuf, ReduceOp,
};

/// Every NCCL collective (all-to-all as grouped sends and receives) at world 1..=9, each rank
/// on its own GPU: NCCL runs them (no host copies at all) and the results are the ones
/// computed here.
#[test]
fn nccl_path_runs_every_collective_nccl_has_for_worlds_1_to_9() {
    for world in 1..=9usize {
        let gpu = MemGpu::new(world);
        let nccl = MemNccl::new(&gpu);
        let n = 5usize;
        group(
            world,
            quick(),
            |_| twin::runtime(&gpu, Some(&nccl)),
            |rank, c| {
                let d = rank as i32;
                let s = gpu.new_stream(d).unwrap();
                let mine: Vec<f32> = (0..n).map(|i| (rank * 10 + i) as f32).collect();
                // all_reduce in place, Sum and Avg
                let p = gpu.upload(d, &mine);
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                    p,
                    n,
                    DType::F32,
                    d,
                    s,
                ));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let want: Vec<f32> = (0..n)
                    .map(|i| (0..world).map(|r| (r * 10 + i) as f32).sum())
                    .collect();
                assert_eq!(
                    gpu.download::<f32>(p, n),
                    want,
                    "world {world} rank {rank} sum"
                );
                // all_reduce out of place, i64 Max
                let xs: Vec<i64> = (0..n as i64).map(|i| i * (rank as i64 + 1) - 7).collect();
                let (a, b) = (gpu.upload(d, &xs), gpu.alloc(d, n * 8));
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Max })
                    .send(dev(a, n, DType::I64, d, s))
                    .recv(dev(b, n, DType::I64, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let want: Vec<i64> = (0..n as i64).map(|i| i * world as i64 - 7).collect();
                assert_eq!(gpu.download::<i64>(b, n), want, "world {world} max");
                // broadcast from the last rank
                let root = world - 1;
                let p = gpu.upload(d, &mine);
                let call =
                    Call::new(Collective::Broadcast { root }).recv(dev(p, n, DType::F32, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let want: Vec<f32> = (0..n).map(|i| (root * 10 + i) as f32).collect();
                assert_eq!(gpu.download::<f32>(p, n), want, "broadcast");
                // reduce (Avg) to rank 0, out of place: the others' outputs untouched
                let (a, b) = (gpu.upload(d, &mine), gpu.upload(d, &vec![-1.0f32; n]));
                let call = Call::new(Collective::Reduce {
                    op: ReduceOp::Avg,
                    root: 0,
                })
                .send(dev(a, n, DType::F32, d, s))
                .recv(dev(b, n, DType::F32, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let avg: Vec<f32> = (0..n)
                    .map(|i| (0..world).map(|r| (r * 10 + i) as f32).sum::<f32>() / world as f32)
                    .collect();
                let got = gpu.download::<f32>(b, n);
                if rank == 0 {
                    assert_eq!(got, avg, "reduce avg");
                } else {
                    assert_eq!(got, vec![-1.0; n], "a non-root's recv is left alone");
                }
                // all_gather and reduce_scatter
                let (a, g) = (gpu.upload(d, &mine), gpu.alloc(d, n * world * 4));
                let call = Call::new(Collective::AllGather { counts: None })
                    .send(dev(a, n, DType::F32, d, s))
                    .recv(dev(g, n * world, DType::F32, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let all: Vec<f32> = (0..world)
                    .flat_map(|r| (0..n).map(move |i| (r * 10 + i) as f32))
                    .collect();
                assert_eq!(gpu.download::<f32>(g, n * world), all, "all_gather");
                let full: Vec<i32> = (0..(n * world) as i32).map(|i| i + rank as i32).collect();
                let (a, o) = (gpu.upload(d, &full), gpu.alloc(d, n * 4));
                let call = Call::new(Collective::ReduceScatter { op: ReduceOp::Sum })
                    .send(dev(a, n * world, DType::I32, d, s))
                    .recv(dev(o, n, DType::I32, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let tri = (0..world as i32).sum::<i32>();
                let want: Vec<i32> = (0..n as i32)
                    .map(|i| (rank * n) as i32 * world as i32 + i * world as i32 + tri)
                    .collect();
                assert_eq!(gpu.download::<i32>(o, n), want, "reduce_scatter");
                // all_to_all, two elements per peer: block p of rank r holds 100 r + p
                let send: Vec<i64> = (0..world as i64)
                    .flat_map(|p| [100 * rank as i64 + p; 2])
                    .collect();
                let (a, b) = (gpu.upload(d, &send), gpu.alloc(d, 2 * world * 8));
                let call = Call::new(Collective::AllToAll {
                    send_counts: None,
                    recv_counts: None,
                })
                .send(dev(a, 2 * world, DType::I64, d, s))
                .recv(dev(b, 2 * world, DType::I64, d, s));
                unsafe { c.run(&call) }.unwrap();
                gpu.sync(d, s).unwrap();
                let want: Vec<i64> = (0..world as i64)
                    .flat_map(|p| [100 * p + rank as i64; 2])
                    .collect();
                assert_eq!(gpu.download::<i64>(b, 2 * world), want, "all_to_all");
            },
        );
        assert_eq!(
            gpu.copies(),
            0,
            "world {world}: NCCL's path copies nothing through the host"
        );
    }
}

/// A rank without NCCL: every rank agrees on host staging, and the results are the same as
/// on NCCL, where all of these run (all-gather with counts per rank and gather as grouped
/// sends and receives) with no host copies.
#[test]
fn staging_when_a_rank_lacks_nccl_gives_what_nccl_gives() {
    for world in [1usize, 2, 3, 5, 9] {
        for without in [None, Some(world - 1)] {
            let gpu = MemGpu::new(world);
            let nccl = MemNccl::new(&gpu);
            let rt = |r| {
                twin::runtime(
                    &gpu,
                    if Some(r) == without {
                        None
                    } else {
                        Some(&nccl)
                    },
                )
            };
            group(world, quick(), rt, |rank, c| {
                let d = rank as i32;
                let s = StreamHandle(0);
                let mine = vec![rank as f64 + 0.5; 3];
                let p = gpu.upload(d, &mine);
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                    p,
                    3,
                    DType::F64,
                    d,
                    s,
                ));
                unsafe { c.run(&call) }.unwrap();
                let sum: f64 = (0..world).map(|r| r as f64 + 0.5).sum();
                assert_eq!(gpu.download::<f64>(p, 3), vec![sum; 3]);
                // all_gather_v: rank r gives r + 1 elements
                let counts: Vec<usize> = (1..=world).collect();
                let total: usize = counts.iter().sum();
                let a = gpu.upload(d, &vec![rank as i32; rank + 1]);
                let g = gpu.alloc(d, total * 4);
                let call = Call::new(Collective::AllGather {
                    counts: Some(counts),
                })
                .send(dev(a, rank + 1, DType::I32, d, s))
                .recv(dev(g, total, DType::I32, d, s));
                unsafe { c.run(&call) }.unwrap();
                let want: Vec<i32> = (0..world).flat_map(|r| vec![r as i32; r + 1]).collect();
                assert_eq!(gpu.download::<i32>(g, total), want, "all_gather_v");
                // all_to_all: block p of rank r holds 100 r + p
                let send: Vec<i32> = (0..world as i32).map(|p| 100 * rank as i32 + p).collect();
                let (a, b) = (gpu.upload(d, &send), gpu.alloc(d, world * 4));
                let call = Call::new(Collective::AllToAll {
                    send_counts: None,
                    recv_counts: None,
                })
                .send(dev(a, world, DType::I32, d, s))
                .recv(dev(b, world, DType::I32, d, s));
                unsafe { c.run(&call) }.unwrap();
                let want: Vec<i32> = (0..world as i32).map(|p| 100 * p + rank as i32).collect();
                assert_eq!(gpu.download::<i32>(b, world), want, "all_to_all");
                // gather to rank 0: the others pass no recv
                let a = gpu.upload(d, &[rank as u8 + 1]);
                let mut call =
                    Call::new(Collective::Gather { root: 0 }).send(dev(a, 1, DType::U8, d, s));
                let g = gpu.alloc(d, world);
                if rank == 0 {
                    call = call.recv(dev(g, world, DType::U8, d, s));
                }
                unsafe { c.run(&call) }.unwrap();
                if rank == 0 {
                    assert_eq!(
                        gpu.download::<u8>(g, world),
                        (1..=world as u8).collect::<Vec<_>>()
                    );
                }
            });
            if without.is_some() {
                assert!(gpu.copies() > 0, "staging copies through the host");
            } else {
                assert_eq!(gpu.copies(), 0, "world {world}: all on NCCL");
            }
        }
    }
}

/// Two ranks on one GPU: NCCL would refuse ("duplicate GPU"), so `auto` stages; `nccl` fails
/// on every rank saying why, and host calls still work after.
#[test]
fn a_shared_gpu_stages_under_auto_and_fails_every_rank_under_nccl() {
    let gpu = MemGpu::new(1);
    let nccl = MemNccl::new(&gpu);
    group(
        3,
        quick(),
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let s = gpu.new_stream(0).unwrap();
            let p = gpu.upload(0, &[rank as f32]);
            unsafe {
                c.run(
                    &Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                        p,
                        1,
                        DType::F32,
                        0,
                        s,
                    )),
                )
            }
            .unwrap();
            assert_eq!(gpu.download::<f32>(p, 1), vec![3.0]);
        },
    );
    let opts = Options {
        cuda: Some(CudaMode::Nccl),
        ..quick()
    };
    let errs = group(
        2,
        opts,
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let p = gpu.upload(0, &[rank as f32]);
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                1,
                DType::F32,
                0,
                StreamHandle(0),
            ));
            let e = unsafe { c.run(&call) }.unwrap_err();
            let again = unsafe { c.run(&call) }.unwrap_err().to_string();
            let mut v = [1.0f32];
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
            assert_eq!(v, [2.0], "host calls still work");
            (e, again)
        },
    );
    for (rank, (e, again)) in errs.iter().enumerate() {
        assert_eq!(e.code(), ErrorCode::Device, "{e}");
        let m = e.to_string();
        assert!(
            m.starts_with(&format!("rank {rank}: all_reduce(seq 1")),
            "{m}"
        );
        assert!(
            m.contains(
                "DTCOMM_CUDA=nccl but ranks 0 and 1 (device 0) share a GPU, which NCCL refuses"
            ),
            "{m}"
        );
        assert!(
            again.contains("share a GPU"),
            "the same answer later: {again}"
        );
    }
}

/// The caller's stream orders the call: a copy queued behind a long kernel on that stream is
/// what the all-reduce reduces, on both paths.
#[test]
fn the_call_waits_for_work_queued_before_it_on_the_callers_stream() {
    for mode in [CudaMode::Nccl, CudaMode::Stage] {
        let gpu = MemGpu::new(4);
        let nccl = MemNccl::new(&gpu);
        let opts = Options {
            cuda: Some(mode),
            ..quick()
        };
        group(
            4,
            opts,
            |_| twin::runtime(&gpu, Some(&nccl)),
            |rank, c| {
                let d = rank as i32;
                let s = gpu.new_stream(d).unwrap();
                let p = gpu.alloc(d, 16);
                gpu.busy(d, s, Duration::from_millis(150));
                gpu.write_async(d, s, p, &[rank as i32 + 1; 4]);
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                    p,
                    4,
                    DType::I32,
                    d,
                    s,
                ));
                let w = unsafe { c.submit(call) };
                w.wait().unwrap();
                gpu.sync(d, s).unwrap();
                assert_eq!(gpu.download::<i32>(p, 4), vec![10; 4], "{mode}");
            },
        );
    }
}

/// NCCL's set-up failing on one rank: that rank names NCCL's code and text, every other rank
/// fails at once naming it (not at the deadline).
#[test]
fn an_nccl_setup_failure_on_one_rank_fails_every_rank_fast() {
    for world in [2usize, 4, 9] {
        let gpu = MemGpu::new(world);
        let nccl = MemNccl::new(&gpu);
        let bad = world / 2;
        nccl.fail_init(bad);
        let opts = Options {
            timeout: Some(Duration::from_secs(60)),
            ..Options::default()
        };
        let started = Instant::now();
        let errs = group(
            world,
            opts,
            |_| twin::runtime(&gpu, Some(&nccl)),
            |rank, c| {
                let d = rank as i32;
                let p = gpu.upload(d, &[1.0f32; 8]);
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                    p,
                    8,
                    DType::F32,
                    d,
                    StreamHandle(0),
                ));
                unsafe { c.run(&call) }.unwrap_err()
            },
        );
        assert_fast(started, "the set-up failure");
        for (rank, e) in errs.iter().enumerate() {
            let m = e.to_string();
            if rank == bad {
                assert_eq!(e.code(), ErrorCode::Device, "{m}");
                assert!(m.contains(&format!("rank {bad}: all_reduce(seq")), "{m}");
                assert!(
                    m.contains("ncclUnhandledCudaError (1)")
                        && m.contains("CUDA driver version is insufficient"),
                    "{m}"
                );
            } else {
                // Told by the failed rank, or by a rank that passed its words on.
                let CommError::Aborted { reason, .. } = e else {
                    panic!("rank {rank}: {m}")
                };
                assert!(
                    reason.starts_with(&format!("rank {bad}: all_reduce(seq")),
                    "rank {rank}: {m}"
                );
                assert!(
                    m.contains("ncclUnhandledCudaError"),
                    "the cause travels: {m}"
                );
            }
        }
    }
}

/// An async error in NCCL on one rank mid-training (its collective never completes): that rank
/// aborts its NCCL communicator and names NCCL's error; the others abort theirs and fail naming
/// it, with the call's sequence number, long before the deadline.
#[test]
fn an_async_nccl_error_aborts_every_rank_naming_the_rank_and_call() {
    for world in [2usize, 3, 8] {
        let gpu = MemGpu::new(world);
        let nccl = MemNccl::new(&gpu);
        nccl.async_error_after(1, 2);
        let opts = Options {
            timeout: Some(Duration::from_secs(60)),
            ..Options::default()
        };
        let started = Instant::now();
        let errs = group(
            world,
            opts,
            |_| twin::runtime(&gpu, Some(&nccl)),
            |rank, c| {
                let d = rank as i32;
                let p = gpu.upload(d, &[1i32; 4]);
                let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                    p,
                    4,
                    DType::I32,
                    d,
                    StreamHandle(0),
                ));
                // Rank 1's first two calls work. A peer may hear of its failure while still
                // watching its own second call (done on the device, not yet seen done): it
                // fails there, naming rank 1's call.
                let (i, e) = (0..3)
                    .find_map(|i| unsafe { c.run(&call) }.err().map(|e| (i, e)))
                    .expect("a call fails");
                assert!(
                    i == 2 || (rank != 1 && i == 1),
                    "rank {rank} failed call {i}: {e}"
                );
                let later = unsafe { c.run(&call) }.unwrap_err();
                assert_eq!(later.code(), ErrorCode::Failed, "later calls fail at once");
                e
            },
        );
        assert_fast(started, "the async error");
        for (rank, e) in errs.iter().enumerate() {
            let m = e.to_string();
            if rank == 1 {
                assert!(
                    m.contains("ncclRemoteError (6)") && m.contains("peer closed the connection"),
                    "{m}"
                );
            } else {
                let CommError::Aborted { reason, .. } = e else {
                    panic!("rank {rank}: {m}")
                };
                assert!(
                    reason.starts_with("rank 1: all_reduce(seq 4"),
                    "rank {rank}: {m}"
                );
            }
            // seq: 0 agreement, 1 unique id, 2 and 3 the calls that worked, 4 this one.
            assert!(
                m.contains("rank 1: all_reduce(seq 4, int32 x 4, sum)"),
                "rank {rank}: {m}"
            );
        }
    }
}

/// A rank that never makes the call: NCCL would wait forever; dtcomm's deadline aborts the
/// NCCL communicator and names the rank that did not enter the call.
#[test]
fn a_rank_that_never_calls_is_named_at_the_deadline() {
    let world = 4;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    let opts = Options {
        timeout: Some(Duration::from_secs(2)),
        ..Options::default()
    };
    let errs = group(
        world,
        opts,
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let p = gpu.upload(d, &[1i32; 4]);
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                4,
                DType::I32,
                d,
                StreamHandle(0),
            ));
            unsafe { c.run(&call) }.unwrap();
            if rank == 2 {
                std::thread::sleep(Duration::from_secs(4));
                return None;
            }
            Some(unsafe { c.run(&call) }.unwrap_err())
        },
    );
    for (rank, e) in errs.iter().enumerate() {
        let Some(e) = e else { continue };
        let m = e.to_string();
        match e {
            CommError::Timeout { suspects, .. } => {
                assert_eq!(&**suspects, &[2], "rank {rank}: {m}");
            }
            // A rank may hear of another's timeout first.
            CommError::Aborted { reason, .. } => assert!(
                reason.contains("ranks [2] appear not to have entered"),
                "{m}"
            ),
            e => panic!("rank {rank}: {e}"),
        }
    }
}

/// `DTCOMM_NCCL_CHECK=1`: ranks calling with different counts fail on every rank, naming the
/// rank that differs and both calls, before NCCL runs anything (it would hang).
#[test]
fn the_nccl_check_turns_a_mismatch_into_an_error_on_every_rank() {
    let world = 3;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    let opts = Options {
        nccl_check: Some(true),
        ..quick()
    };
    let errs = group(
        world,
        opts,
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let n = if rank == 2 { 6 } else { 4 };
            let p = gpu.upload(d, &vec![1.0f32; n]);
            let ok = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                4,
                DType::F32,
                d,
                StreamHandle(0),
            ));
            unsafe { c.run(&ok) }.unwrap();
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                n,
                DType::F32,
                d,
                StreamHandle(0),
            ));
            unsafe { c.run(&call) }.unwrap_err()
        },
    );
    for (rank, e) in errs.iter().enumerate() {
        let CommError::Mismatch {
            peer, ours, theirs, ..
        } = e
        else {
            panic!("rank {rank}: {e}")
        };
        assert_eq!(*peer, if rank == 2 { 0 } else { 2 }, "{e}");
        assert_eq!(
            (ours.count, theirs.count),
            if rank == 2 { (6, 4) } else { (4, 6) },
            "{e}"
        );
        assert_eq!(ours.seq, theirs.seq);
    }
}

/// Bad device calls are refused before anything is sent, and the communicator stays usable.
#[test]
fn device_buffers_are_refused_with_reasons_and_nothing_is_lost() {
    // No runtime: the crate without the `cuda` feature has none.
    let c = Communicator::in_memory(1, Options::default())
        .unwrap()
        .remove(0);
    let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(RawBuf::device(
        0x1000 as *mut u8,
        4,
        DType::F32,
        0,
        0,
    ));
    if !cfg!(feature = "cuda") {
        let e = unsafe { c.run(&call) }.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
        assert!(e.to_string().contains("built without CUDA support"), "{e}");
    }
    // DTCOMM_CUDA=off
    let c = Communicator::in_memory(
        1,
        Options {
            cuda: Some(CudaMode::Off),
            ..Options::default()
        },
    )
    .unwrap()
    .remove(0);
    let gpu = MemGpu::new(1);
    c.set_device_runtime(twin::runtime(&gpu, None));
    let e = unsafe { c.run(&call) }.unwrap_err();
    assert!(
        e.to_string()
            .contains("device buffers are refused (explicit=off)"),
        "{e}"
    );
    // Host and device buffers in one call.
    let c = Communicator::in_memory(1, Options::default())
        .unwrap()
        .remove(0);
    c.set_device_runtime(twin::runtime(&gpu, None));
    let mut host = [0f32; 4];
    let mixed = call.clone().send(RawBuf::of_mut(&mut host));
    let e = unsafe { c.run(&mixed) }.unwrap_err();
    assert!(
        e.to_string()
            .contains("must all be on the host or all on one device"),
        "{e}"
    );
    let mut v = [2.0f32];
    c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
    assert_eq!(v, [2.0]);
}

/// `submit` on NCCL starts the call on the caller's thread and returns before the device ran
/// it (no host wait, even behind a long kernel and for several calls in a row); work queued on
/// the caller's stream after `submit` sees the results.
#[test]
fn submitted_nccl_calls_return_at_once_and_order_the_callers_stream() {
    let world = 3;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    group(
        world,
        quick(),
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let s = gpu.new_stream(d).unwrap();
            let p = gpu.upload(d, &[rank as i32; 4]);
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                4,
                DType::I32,
                d,
                s,
            ));
            unsafe { c.run(&call) }.unwrap(); // agreement and NCCL set-up out of the way
            gpu.busy(d, s, Duration::from_millis(1500));
            let works: Vec<_> = (0..3).map(|_| unsafe { c.submit(call.clone()) }).collect();
            // Had `submit` waited for the device, the first call would be complete by now.
            assert!(
                !works[0].test(),
                "rank {rank}: submit returned before the device ran the call"
            );
            let mut host = [0i32; 4];
            unsafe { gpu.to_host(d, s, p, host.as_mut_ptr().cast(), 16) }.unwrap();
            gpu.sync(d, s).unwrap();
            // 0 + 1 + 2 = 3 after the blocking call, then three sums of 3 ranks: 3 * 27
            assert_eq!(host, [81; 4], "rank {rank}: the stream saw every result");
            for w in works {
                w.wait().unwrap();
            }
            let mut v = [1.0f32];
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
            assert_eq!(v, [3.0], "a host call after device calls");
        },
    );
}

/// Host staging waits for the caller's stream against the call's deadline: a stream stuck
/// behind a kernel longer than that fails the call on this rank, naming the stream, and the
/// peer (already in the host collective) is told at once.
#[test]
fn staging_behind_a_stuck_stream_fails_at_the_deadline_and_tells_the_peers() {
    let gpu = MemGpu::new(2);
    let opts = Options {
        cuda: Some(CudaMode::Stage),
        ..quick()
    };
    let errs = group(
        2,
        opts,
        |_| twin::runtime(&gpu, None),
        |rank, c| {
            let d = rank as i32;
            let s = gpu.new_stream(d).unwrap();
            let p = gpu.upload(d, &[1.0f32; 4]);
            // Rank 0's call has a 1 s deadline and its stream is busy for 3 s; rank 1 would
            // wait 20 s in the host collective, but hears of rank 0's failure first.
            let mut call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                4,
                DType::F32,
                d,
                s,
            ));
            if rank == 0 {
                gpu.busy(d, s, Duration::from_secs(3));
                call = call.deadline(Duration::from_secs(1));
            }
            unsafe { c.run(&call) }.unwrap_err()
        },
    );
    let m = errs[0].to_string();
    assert_eq!(errs[0].code(), ErrorCode::Device, "{m}");
    assert!(
        m.contains("host staging") && m.contains("did not finish within the call's deadline"),
        "{m}"
    );
    let CommError::Aborted { reason, .. } = &errs[1] else {
        panic!("rank 1: {}", errs[1])
    };
    assert!(
        reason.starts_with("rank 0: all_reduce(seq 1"),
        "{}",
        errs[1]
    );
    // The copy queued behind the stuck work runs when the stream frees up (3 s after it
    // was queued): the staging memory it writes must still be there (it used to be freed
    // with the failed call, and the late copy corrupted the heap now and then).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        gpu.freed_host_writes(),
        0,
        "a late copy wrote into freed staging memory"
    );
}

/// Point to point on device buffers involves two ranks only, so it is staged without the
/// all-rank path agreement: a first device call that is a send/recv between two ranks of three
/// completes (the third makes no call), and later collectives still agree and use NCCL.
#[test]
fn device_send_recv_as_the_first_device_call_needs_no_other_rank() {
    let world = 3;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    group(
        world,
        quick(),
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let s = StreamHandle(0);
            let p = gpu.upload(d, &[rank as i64 * 10; 3]);
            let b = dev(p, 3, DType::I64, d, s);
            match rank {
                0 => unsafe { c.run(&Call::new(Collective::Send { peer: 1 }).send(b)) }.unwrap(),
                1 => {
                    unsafe { c.run(&Call::new(Collective::Recv { peer: 0 }).recv(b)) }.unwrap();
                    assert_eq!(gpu.download::<i64>(p, 3), vec![0; 3]);
                }
                _ => {}
            }
            // Rank 2 reaches this host barrier with no device call made: had the send/recv
            // run the all-rank agreement, ranks 0 and 1 would be in an all-gather here.
            c.barrier().unwrap();
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(b);
            unsafe { c.run(&call) }.unwrap();
            // rank 1 holds rank 0's 0 now: 0 + 0 + 20
            assert_eq!(gpu.download::<i64>(p, 3), vec![20; 3], "rank {rank}");
        },
    );
    assert_eq!(
        gpu.copies(),
        2,
        "the send's copy out and the receive's copy in; NCCL after"
    );
}

/// Staged calls keep their host memory for the next ones (pinned memory is slow to get): a
/// run of calls of one size allocates once per buffer, a smaller call reuses it, a larger one
/// allocates again; the results stay right throughout.
#[test]
fn staged_calls_reuse_their_host_memory() {
    let world = 3;
    let gpu = MemGpu::new(world);
    let rt = |_| twin::runtime(&gpu, None);
    let allreduce = |c: &Communicator, rank: usize, n: usize| {
        let d = rank as i32;
        let s = StreamHandle(0);
        let p = gpu.upload(d, &vec![rank as f32 + 1.0; n]);
        let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
            p,
            n,
            DType::F32,
            d,
            s,
        ));
        unsafe { c.run(&call) }.unwrap();
        assert_eq!(gpu.download::<f32>(p, n), vec![6.0; n]);
    };
    group(world, quick(), rt, |rank, c| {
        allreduce(c, rank, 1000);
        c.barrier().unwrap();
    });
    let first = gpu.host_allocs();
    assert!(
        (1..=2 * world).contains(&first),
        "{first} host buffers for one call on {world} ranks"
    );
    group(world, quick(), rt, |rank, c| {
        for _ in 0..20 {
            allreduce(c, rank, 1000);
        }
        allreduce(c, rank, 10);
    });
    // (a new group: new communicators, so each rank allocates once more, then never)
    assert_eq!(
        gpu.host_allocs(),
        2 * first,
        "20 calls of one size and a smaller one"
    );
    group(world, quick(), rt, |rank, c| {
        allreduce(c, rank, 1000);
        allreduce(c, rank, 100_000);
        allreduce(c, rank, 100_000);
    });
    assert_eq!(
        gpu.host_allocs(),
        4 * first,
        "a larger call allocates once more"
    );
}
