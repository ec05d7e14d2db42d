//! Staging memory kept between calls: pinned host memory is slow to get (`cuMemHostAlloc`
//! maps and locks pages; milliseconds for megabytes), so a communicator keeps the buffers its
//! staged calls used and lends them again. A request takes the smallest kept buffer that is
//! large enough, or a new one rounded up to a power of two (so a run of growing sizes
//! allocates log-many times); at most [`KEEP`] buffers are kept, the largest ones.

use super::api::{DeviceError, HostMemory};

/// Most buffers kept (a staged call uses at most two: its send and its receive buffer).
pub(crate) const KEEP: usize = 2;

/// Host staging buffers kept between calls.
#[derive(Default)]
pub(crate) struct StagingPool {
    /// Kept buffers and their lengths in bytes.
    free: Vec<(usize, Box<dyn HostMemory>)>,
}

impl StagingPool {
    /// A buffer of at least `bytes`: a kept one, or one from `alloc` (asked for `bytes`
    /// rounded up to a power of two).
    pub(crate) fn take(
        &mut self,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<Box<dyn HostMemory>, DeviceError>,
    ) -> Result<Box<dyn HostMemory>, DeviceError> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, (len, _))| *len >= bytes)
            .min_by_key(|(_, (len, _))| *len)
            .map(|(i, _)| i);
        match best {
            Some(i) => Ok(self.free.swap_remove(i).1),
            None => alloc(bytes.max(1).next_power_of_two()),
        }
    }

    /// Keeps `buf` for later calls (dropping the smallest kept one past [`KEEP`]).
    pub(crate) fn give(&mut self, mut buf: Box<dyn HostMemory>) {
        self.free.push((buf.bytes().len(), buf));
        if self.free.len() > KEEP {
            let (i, _) = self
                .free
                .iter()
                .enumerate()
                .min_by_key(|(_, (len, _))| *len)
                .expect("not empty");
            self.free.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(
        log: &mut Vec<usize>,
    ) -> impl FnOnce(usize) -> Result<Box<dyn HostMemory>, DeviceError> + '_ {
        move |n| {
            log.push(n);
            Ok(Box::new(vec![0u64; n.div_ceil(8)]))
        }
    }

    #[test]
    fn reuses_what_fits_and_allocates_powers_of_two_otherwise() {
        let mut p = StagingPool::default();
        let mut log = Vec::new();
        let mut a = p.take(1000, alloc(&mut log)).unwrap();
        assert_eq!(a.len_hint(), 1024);
        p.give(a);
        for _ in 0..10 {
            let b = p.take(1000, alloc(&mut log)).unwrap();
            p.give(b);
        }
        assert_eq!(
            log,
            vec![1024],
            "ten more calls of one size: no new allocation"
        );
        let mut small = p.take(10, alloc(&mut log)).unwrap();
        assert_eq!(
            small.len_hint(),
            1024,
            "a smaller call uses the kept buffer"
        );
        let big = p.take(5000, alloc(&mut log)).unwrap();
        assert_eq!(log, vec![1024, 8192]);
        p.give(small);
        p.give(big);
        let mut c = p.take(0, alloc(&mut log)).unwrap();
        assert_eq!(c.len_hint(), 1024, "the smallest that fits");
        p.give(c);
    }

    #[test]
    fn keeps_at_most_two_the_largest() {
        let mut p = StagingPool::default();
        let mut log = Vec::new();
        let bufs: Vec<_> = [8, 64, 512]
            .iter()
            .map(|&n| p.take(n, alloc(&mut log)).unwrap())
            .collect();
        for b in bufs {
            p.give(b);
        }
        let mut kept: Vec<usize> = p.free.iter().map(|(len, _)| *len).collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![64, 512]);
    }

    trait LenHint {
        fn len_hint(&mut self) -> usize;
    }
    impl LenHint for Box<dyn HostMemory> {
        fn len_hint(&mut self) -> usize {
            self.bytes().len()
        }
    }
}
