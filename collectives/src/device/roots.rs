//! Which ranks make NCCL's unique ids when a communicator is bootstrapped from several roots
//! (`ncclCommInitRankScalable`, NCCL 2.23): one id per `per_root` ranks, each made by the first
//! rank of its block, the blocks as NCCL spreads ranks over roots (the first `world % n`
//! blocks one rank longer), as torch places them. Pure: the same answer on every rank.

/// Bytes of one id and its "made" flag in the exchange buffer.
pub(crate) const SLOT: usize = 129;

/// The ranks that make an id, in id order: one (rank 0) when `world` fits one root or
/// `per_root` is 0.
pub(crate) fn roots(world: usize, per_root: usize) -> Vec<usize> {
    if per_root == 0 || world <= per_root {
        return vec![0];
    }
    let n = world.div_ceil(per_root);
    let (long, len) = (world % n, world / n);
    (0..n)
        .map(|i| {
            if i < long {
                i * (len + 1)
            } else {
                long * (len + 1) + (i - long) * len
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::roots;

    #[test]
    fn one_root_up_to_the_block_size_then_blocks_as_nccl_spreads_them() {
        assert_eq!(roots(1, 128), [0]);
        assert_eq!(roots(128, 128), [0]);
        assert_eq!(roots(129, 128), [0, 65]);
        assert_eq!(roots(7, 3), [0, 3, 5]);
        assert_eq!(roots(6, 3), [0, 3]);
        assert_eq!(roots(1000, 0), [0]);
        let r = roots(100_000, 128);
        assert_eq!(r.len(), 782);
        assert!(r.windows(2).all(|w| (127..=128).contains(&(w[1] - w[0]))));
    }
}
