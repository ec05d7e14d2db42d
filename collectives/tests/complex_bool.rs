//! complex64, complex128 and bool buffers through the byte-level calls (what the Python
//! binding and the C ABI use), over every all-reduce algorithm: sums are componentwise,
//! products complex, bools combine logically; a complex max or a bool mean is refused on every
//! rank before anything is sent and the communicator stays usable; bitwise `reduce` works on
//! integers and bool.

mod common;

use std::time::Duration;

use common::on_ranks;
use dtcomm::{Algo, Call, Collective, CommError, Communicator, DType, Options, RawBuf, ReduceOp};

fn group(world: usize, algo: Algo) -> Vec<Communicator> {
    Communicator::in_memory(
        world,
        Options {
            timeout: Some(Duration::from_secs(20)),
            algo: Some(algo),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Interleaved (re, im) pairs of rank `r`'s complex input: element i is (i + r) + (r - i)i.
fn input(r: usize, n: usize) -> Vec<f64> {
    (0..n)
        .flat_map(|i| [(i + r) as f64, r as f64 - i as f64])
        .collect()
}

fn all_reduce(
    c: &Communicator,
    op: ReduceOp,
    buf: *mut u8,
    n: usize,
    d: DType,
) -> Result<(), CommError> {
    let call = Call::new(Collective::AllReduce { op }).recv(RawBuf::host(buf, n, d));
    // SAFETY: `buf` holds `n` elements of `d`, alive and untouched until `run` returns.
    unsafe { c.run(&call) }
}

#[test]
fn complex_sum_prod_avg_over_every_algorithm() {
    // 40_001 elements: rings and trees split it into chunks (never inside an element)
    for algo in [Algo::Ring, Algo::Tree, Algo::Doubling, Algo::Direct] {
        for n in [1usize, 7, 40_001] {
            let world = 3;
            let comms = group(world, algo);
            on_ranks(&comms, |c| {
                let r = c.rank();
                let mut v = input(r, n);
                all_reduce(c, ReduceOp::Sum, v.as_mut_ptr().cast(), n, DType::C128).unwrap();
                let want: Vec<f64> = (0..world)
                    .map(|p| input(p, n))
                    .fold(vec![0.0; 2 * n], |a, b| {
                        a.iter().zip(&b).map(|(x, y)| x + y).collect()
                    });
                assert_eq!(v, want, "{algo:?} n {n} complex128 sum");
                let mut f: Vec<f32> = input(r, n).iter().map(|x| *x as f32).collect();
                all_reduce(c, ReduceOp::Avg, f.as_mut_ptr().cast(), n, DType::C64).unwrap();
                let avg: Vec<f32> = want.iter().map(|x| (*x / world as f64) as f32).collect();
                assert_eq!(f, avg, "{algo:?} n {n} complex64 avg");
                // (1 + i)^world: (1+i)^3 = -2 + 2i
                let mut p: Vec<f64> = [1.0, 1.0].repeat(n);
                all_reduce(c, ReduceOp::Prod, p.as_mut_ptr().cast(), n, DType::C128).unwrap();
                assert!(
                    p.chunks(2).all(|z| z == [-2.0, 2.0]),
                    "{algo:?} n {n} prod {:?}",
                    &p[..2]
                );
            });
        }
    }
}

#[test]
fn bool_ops_are_logical() {
    for algo in [Algo::Ring, Algo::Tree] {
        let comms = group(2, algo);
        on_ranks(&comms, |c| {
            let mine: [u8; 4] = if c.rank() == 0 {
                [0, 0, 1, 1]
            } else {
                [0, 1, 0, 1]
            };
            for (op, want) in [
                (ReduceOp::Sum, [0u8, 1, 1, 1]),
                (ReduceOp::Max, [0, 1, 1, 1]),
                (ReduceOp::Prod, [0, 0, 0, 1]),
                (ReduceOp::Min, [0, 0, 0, 1]),
                (ReduceOp::Bxor, [0, 1, 1, 0]),
            ] {
                let mut b = mine;
                all_reduce(c, op, b.as_mut_ptr(), 4, DType::Bool).unwrap();
                assert_eq!(b, want, "{algo:?} {op}");
            }
        });
    }
}

#[test]
fn an_op_the_dtype_lacks_is_refused_on_every_rank_and_nothing_hangs() {
    let comms = group(2, Algo::Auto);
    on_ranks(&comms, |c| {
        let mut z = [1.0f32, 2.0];
        for (op, d, words) in [
            (ReduceOp::Max, DType::C64, ["max", "complex64"]),
            (ReduceOp::Min, DType::C64, ["min", "complex64"]),
            (ReduceOp::Avg, DType::Bool, ["avg", "bool"]),
            (ReduceOp::Band, DType::F32, ["band", "float"]),
        ] {
            let n = if d == DType::C64 { 1 } else { 2 };
            let e = all_reduce(c, op, z.as_mut_ptr().cast(), n, d).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, CommError::InvalidArgument { .. }), "{msg}");
            assert!(msg.contains(&format!("rank {}", c.rank())), "{msg}");
            assert!(words.iter().all(|w| msg.contains(w)), "{msg}");
            let red = Call::new(Collective::Reduce { op, root: 1 }).recv(RawBuf::host(
                z.as_mut_ptr().cast(),
                n,
                d,
            ));
            // SAFETY: as in `all_reduce`.
            assert!(unsafe { c.run(&red) }.is_err());
        }
        let mut v = [c.rank() as f32 + 1.0; 3];
        all_reduce(c, ReduceOp::Sum, v.as_mut_ptr().cast(), 3, DType::F32).unwrap();
        assert_eq!(v, [3.0; 3], "still usable");
    });
}

#[test]
fn bitwise_reduce_on_integers_and_bool() {
    let comms = group(3, Algo::Auto);
    on_ranks(&comms, |c| {
        let r = c.rank();
        let vals = [0b1100i32, 0b1010, 0b0110];
        for (op, want) in [
            (ReduceOp::Band, 0b1100 & 0b1010 & 0b0110),
            (ReduceOp::Bor, 0b1110),
            (ReduceOp::Bxor, 0b1100 ^ 0b1010 ^ 0b0110),
        ] {
            for root in 0..3 {
                let mut v = [vals[r]; 5];
                let call = Call::new(Collective::Reduce { op, root }).recv(RawBuf::host(
                    v.as_mut_ptr().cast(),
                    5,
                    DType::I32,
                ));
                // SAFETY: `v` is alive and untouched until `run` returns.
                unsafe { c.run(&call) }.unwrap();
                let expect = if r == root { want } else { vals[r] };
                assert_eq!(v, [expect; 5], "{op} root {root} rank {r}");
            }
        }
        let mut b = [u8::from(r != 1), 1];
        let call = Call::new(Collective::Reduce {
            op: ReduceOp::Band,
            root: 2,
        })
        .recv(RawBuf::host(b.as_mut_ptr(), 2, DType::Bool));
        // SAFETY: as above.
        unsafe { c.run(&call) }.unwrap();
        if r == 2 {
            assert_eq!(b, [0, 1]);
        }
    });
}
