//! The engine's device path for exchanges (all-to-all and its uneven forms), driven by the
//! in-memory twins of CUDA and NCCL with every rank a thread of this process: NCCL's grouped
//! sends and receives where every rank has them, host staging where one lacks them (results
//! equal to the host path's, nothing written outside the output), counts that do not pair up
//! and an exchange that overwrites its own input failing every rank. `device.rs` has the rest.

use std::time::Instant;

mod common;
use common::device::{assert_fast, dev, group, quick};

use dtcomm::device::twin::{self, MemGpu, MemNccl};
use dtcomm::device::{DevPtr, DeviceApi, StreamHandle};
use dtcomm::{Call, Collective, CommError, Communicator, DType, Options, RawBuf};

/// Sentinel elements on either side of a device output, to see nothing outside it is written.
const GUARD: usize = 4;
const SENTINEL: i32 = -7;

/// Device memory of `n` i32 with [`GUARD`] sentinels on either side: (the whole, the output).
fn guarded(gpu: &MemGpu, d: i32, n: usize) -> (DevPtr, DevPtr) {
    let whole = gpu.upload(d, &vec![SENTINEL; n + 2 * GUARD]);
    (whole, DevPtr(whole.0 + (GUARD * 4) as u64))
}

/// The `n` outputs of [`guarded`] memory, checking the sentinels around them are untouched.
fn unguard(gpu: &MemGpu, whole: DevPtr, n: usize, what: &str) -> Vec<i32> {
    let all = gpu.download::<i32>(whole, n + 2 * GUARD);
    assert!(
        all[..GUARD]
            .iter()
            .chain(&all[GUARD + n..])
            .all(|&x| x == SENTINEL),
        "{what}: written outside the output: {all:?}"
    );
    all[GUARD..GUARD + n].to_vec()
}

/// Runs `collective` on device buffers (`send`, an output of `recv` elements, each only when
/// given), then the same on host buffers; checks the device's bytes are the host's (and nothing
/// around the output written) and returns them.
#[allow(clippy::too_many_arguments)]
fn device_and_host(
    c: &Communicator,
    gpu: &MemGpu,
    d: i32,
    s: StreamHandle,
    collective: Collective,
    send: Option<&[i32]>,
    recv: Option<usize>,
    what: &str,
) -> Option<Vec<i32>> {
    let mut call = Call::new(collective.clone());
    if let Some(v) = send {
        call = call.send(dev(gpu.upload(d, v), v.len(), DType::I32, d, s));
    }
    let out = recv.map(|n| (guarded(gpu, d, n), n));
    if let Some(((_, p), n)) = out {
        call = call.recv(dev(p, n, DType::I32, d, s));
    }
    unsafe { c.run(&call) }.unwrap_or_else(|e| panic!("{what} on the device: {e}"));
    gpu.sync(d, s).unwrap();
    let got = out.map(|((whole, _), n)| unguard(gpu, whole, n, what));
    let mut host_out = recv.map(|n| vec![SENTINEL; n]);
    let mut host = Call::new(collective);
    if let Some(v) = send {
        host = host.send(RawBuf::of(v));
    }
    if let Some(o) = host_out.as_mut() {
        host = host.recv(RawBuf::of_mut(o));
    }
    unsafe { c.run(&host) }.unwrap_or_else(|e| panic!("{what} on the host: {e}"));
    assert_eq!(got, host_out, "{what}: the device's bytes are the host's");
    got
}

/// all_gather_v, all_to_all_v, gather and scatter on device buffers at world 1..=9, roots other
/// than 0 and some counts 0: on NCCL they are one group of `ncclSend`/`ncclRecv` each (counted
/// by the twin; no host copies), and with an NCCL that lacks those (every rank's agreement says
/// so) they are staged; either way the bytes are the host collective's and nothing around the
/// outputs is written. `DTCOMM_NCCL_CHECK` is on and passes them (all_to_all_v's count differs
/// per rank by design).
#[test]
fn exchanges_run_on_nccl_send_recv_or_are_staged_without_it_for_worlds_1_to_9() {
    for p2p in [true, false] {
        for world in 1..=9usize {
            let gpu = MemGpu::new(world);
            let nccl = MemNccl::new(&gpu);
            if !p2p {
                nccl.without_p2p();
            }
            let opts = Options {
                nccl_check: Some(true),
                ..quick()
            };
            let case = format!("world {world}, p2p {p2p}");
            let (groot, sroot) = (world / 2, world - 1);
            group(
                world,
                opts,
                |_| twin::runtime(&gpu, Some(&nccl)),
                |rank, c| {
                    let d = rank as i32;
                    let s = gpu.new_stream(d).unwrap();
                    let r = rank as i32;
                    // all_gather_v: rank p gives (7p + 3) % 4 elements (ranks 3 and 7 none)
                    let counts: Vec<usize> = (0..world).map(|p| (p * 7 + 3) % 4).collect();
                    let mine: Vec<i32> = (0..counts[rank] as i32).map(|i| 1000 * r + i).collect();
                    let got = device_and_host(
                        c,
                        &gpu,
                        d,
                        s,
                        Collective::AllGather {
                            counts: Some(counts.clone()),
                        },
                        Some(&mine),
                        Some(counts.iter().sum()),
                        &format!("{case}: all_gather_v"),
                    );
                    let want: Vec<i32> = (0..world)
                        .flat_map(|p| (0..counts[p] as i32).map(move |i| 1000 * p as i32 + i))
                        .collect();
                    assert_eq!(got, Some(want), "{case}: all_gather_v");
                    // all_to_all_v: rank p sends q (p + 2q) % 3 elements, 1000 p + 100 q + i
                    let sc: Vec<usize> = (0..world).map(|q| (rank + 2 * q) % 3).collect();
                    let rc: Vec<usize> = (0..world).map(|q| (q + 2 * rank) % 3).collect();
                    let send: Vec<i32> = (0..world)
                        .flat_map(|q| (0..sc[q] as i32).map(move |i| 1000 * r + 100 * q as i32 + i))
                        .collect();
                    let got = device_and_host(
                        c,
                        &gpu,
                        d,
                        s,
                        Collective::AllToAll {
                            send_counts: Some(sc),
                            recv_counts: Some(rc.clone()),
                        },
                        Some(&send),
                        Some(rc.iter().sum()),
                        &format!("{case}: all_to_all_v"),
                    );
                    let want: Vec<i32> = (0..world)
                        .flat_map(|q| (0..rc[q] as i32).map(move |i| 1000 * q as i32 + 100 * r + i))
                        .collect();
                    assert_eq!(got, Some(want), "{case}: all_to_all_v");
                    // gather to world / 2: three elements each; the others pass no recv
                    let mine = [10 * r, 10 * r + 1, 10 * r + 2];
                    let got = device_and_host(
                        c,
                        &gpu,
                        d,
                        s,
                        Collective::Gather { root: groot },
                        Some(&mine),
                        (rank == groot).then_some(3 * world),
                        &format!("{case}: gather"),
                    );
                    if rank == groot {
                        let want: Vec<i32> = (0..world as i32)
                            .flat_map(|p| [10 * p, 10 * p + 1, 10 * p + 2])
                            .collect();
                        assert_eq!(got, Some(want), "{case}: gather");
                    }
                    // scatter from the last rank: two elements each; the others pass no send
                    let all: Vec<i32> = (0..2 * world as i32).map(|i| 5 * i + 1).collect();
                    let got = device_and_host(
                        c,
                        &gpu,
                        d,
                        s,
                        Collective::Scatter { root: sroot },
                        (rank == sroot).then_some(&all[..]),
                        Some(2),
                        &format!("{case}: scatter"),
                    );
                    assert_eq!(got, Some(all[2 * rank..2 * rank + 2].to_vec()), "{case}");
                },
            );
            // World 1's all_gather_v has equal counts: ncclAllGather.
            let exchanges = world * (3 + usize::from(world > 1));
            if p2p {
                assert_eq!(
                    nccl.enqueued("ncclSend/ncclRecv"),
                    exchanges,
                    "{case}: one group of sends and receives per call and rank"
                );
                assert_eq!(gpu.copies(), 0, "{case}: nothing staged");
            } else {
                assert_eq!(nccl.enqueued("ncclSend/ncclRecv"), 0, "{case}");
                assert!(gpu.copies() > 0, "{case}: staged through the host");
            }
        }
    }
}

/// An exchange whose counts do not pair up (rank 0 sends rank 1 two elements, rank 1 expects
/// three; each rank's own arguments are fine): NCCL would hang or truncate; the twin fails both
/// ranks naming both and the counts, writes nothing, and every rank fails fast.
#[test]
fn an_exchange_whose_counts_do_not_pair_up_fails_naming_both_ranks() {
    let world = 3;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    let started = Instant::now();
    let outs = group(
        world,
        quick(),
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let (sc, rc) = match rank {
                0 => (vec![1, 2, 1], vec![1, 1, 1]),
                1 => (vec![1, 1, 1], vec![3, 1, 1]),
                _ => (vec![1, 1, 1], vec![1, 1, 1]),
            };
            let (ns, nr) = (sc.iter().sum::<usize>(), rc.iter().sum::<usize>());
            let a = gpu.upload(d, &vec![rank as i32; ns]);
            let (whole, b) = guarded(&gpu, d, nr);
            let call = Call::new(Collective::AllToAll {
                send_counts: Some(sc),
                recv_counts: Some(rc),
            })
            .send(dev(a, ns, DType::I32, d, StreamHandle(0)))
            .recv(dev(b, nr, DType::I32, d, StreamHandle(0)));
            let r = unsafe { c.run(&call) };
            (r, gpu.download::<i32>(whole, nr + 2 * GUARD))
        },
    );
    assert_fast(started, "the mismatched exchange");
    let words = "rank 0 sends 2 elements to rank 1 but rank 1 expects 3 elements from rank 0";
    for (rank, (r, mem)) in outs.iter().enumerate().take(2) {
        let e = r.as_ref().unwrap_err();
        let m = e.to_string();
        assert!(m.contains(words), "rank {rank}: {m}");
        assert!(m.contains("all_to_all(seq"), "rank {rank}: {m}");
        if let CommError::Device { .. } = e {
            assert!(m.contains("ncclInvalidUsage"), "{m}");
        }
        assert!(
            mem.iter().all(|&x| x == SENTINEL),
            "rank {rank}: nothing written: {mem:?}"
        );
    }
    // Rank 2's own blocks pair up: its call may finish before it hears of the others.
    if let Err(e) = &outs[2].0 {
        assert!(e.to_string().contains(words), "rank 2: {e}");
    }
}

/// An in-place all-to-all on NCCL would have receives overwrite data not yet sent: refused on
/// the rank that made it, and every rank fails fast instead of NCCL corrupting the data.
#[test]
fn an_exchange_that_overwrites_its_own_input_fails_every_rank() {
    let world = 2;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    let started = Instant::now();
    let errs = group(
        world,
        quick(),
        |_| twin::runtime(&gpu, Some(&nccl)),
        |rank, c| {
            let d = rank as i32;
            let p = gpu.upload(d, &[rank as i32; 4]);
            let b = dev(p, 4, DType::I32, d, StreamHandle(0));
            let call = Call::new(Collective::AllToAll {
                send_counts: None,
                recv_counts: None,
            })
            .send(b)
            .recv(b);
            unsafe { c.run(&call) }.unwrap_err()
        },
    );
    assert_fast(started, "the overlap");
    for (rank, e) in errs.iter().enumerate() {
        let m = e.to_string();
        assert!(
            m.contains("send and recv overlap") && m.contains("all_to_all(seq"),
            "rank {rank}: {m}"
        );
    }
    assert_eq!(nccl.enqueued("ncclSend/ncclRecv"), 0);
}
