//! NCCL communicators bootstrapped from several roots (`ncclCommInitRankScalable`, NCCL 2.23),
//! on the in-memory twins: past `nccl_ranks_per_root` ranks every rank sets up from one unique id
//! per block of ranks, the same ids in the same order everywhere (exchanged in one host
//! all-reduce, no rank-0 broadcast), and a library without the call sets up from rank 0's id.

mod common;
use common::device::{dev, group};

use std::time::Duration;

use dtcomm::device::DeviceApi;
use dtcomm::device::twin::{self, MemGpu, MemNccl};
use dtcomm::{Call, Collective, DType, Options, ReduceOp};

/// Every rank of `world` sums `rank + 1` over NCCL with `per_root` ranks per root; returns each
/// rank's result.
fn sums(gpu: &MemGpu, nccl: &MemNccl, world: usize, per_root: usize) -> Vec<Vec<f32>> {
    let opts = Options {
        timeout: Some(Duration::from_secs(30)),
        nccl_ranks_per_root: Some(per_root),
        ..Options::default()
    };
    group(
        world,
        opts,
        |_| twin::runtime(gpu, Some(nccl)),
        |rank, c| {
            let d = rank as i32;
            let s = gpu.new_stream(d).unwrap();
            let p = gpu.upload(d, &[rank as f32 + 1.0; 4]);
            let call = Call::new(Collective::AllReduce { op: ReduceOp::Sum }).recv(dev(
                p,
                4,
                DType::F32,
                d,
                s,
            ));
            unsafe { c.run(&call) }.unwrap();
            gpu.sync(d, s).unwrap();
            gpu.download::<f32>(p, 4)
        },
    )
}

/// (rank, ids) of every set-up, by rank.
fn inits(nccl: &MemNccl) -> Vec<(usize, usize)> {
    let mut v = nccl.inits();
    v.sort_unstable();
    v
}

#[test]
fn past_the_block_size_every_rank_sets_up_from_one_id_per_block() {
    let world = 7;
    let want = vec![vec![28.0f32; 4]; world];
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    // Blocks of at most 3 ranks: 0-2, 3-4, 5-6, three ids (made by ranks 0, 3 and 5).
    assert_eq!(sums(&gpu, &nccl, world, 3), want);
    assert_eq!(inits(&nccl), (0..world).map(|r| (r, 3)).collect::<Vec<_>>());
    // At most the block size (and 0: never scalable): one id, the plain set-up.
    for per_root in [7, 0] {
        let gpu = MemGpu::new(world);
        let nccl = MemNccl::new(&gpu);
        assert_eq!(sums(&gpu, &nccl, world, per_root), want);
        assert_eq!(inits(&nccl), (0..world).map(|r| (r, 1)).collect::<Vec<_>>());
    }
}

#[test]
fn without_the_scalable_call_every_rank_sets_up_from_rank_0s_id() {
    let world = 5;
    let gpu = MemGpu::new(world);
    let nccl = MemNccl::new(&gpu);
    nccl.without_scalable_init();
    assert_eq!(sums(&gpu, &nccl, world, 2), vec![vec![15.0f32; 4]; world]);
    assert_eq!(inits(&nccl), (0..world).map(|r| (r, 1)).collect::<Vec<_>>());
}
