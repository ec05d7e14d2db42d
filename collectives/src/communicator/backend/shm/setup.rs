//! Finding a rank's host peers and joining them in a segment, over the links already up (so it
//! works the same after a store or a native rendezvous): up to four small allgathers.
//!
//! 1. identities: host digest, pid, pid namespace, whether this rank wants shared memory
//!    (`host::record`). Skipped when the address book already holds every rank's record (the
//!    native `Welcome`'s full peer table, the store entries): every rank sees the same book,
//!    so all skip it or none;
//! 2. the lowest rank of each host makes the host's segment and tells its path (or why not);
//! 3. the others attach and check it; everyone tells whether that worked;
//! 4. each rank tries a single-copy read of every host peer's mapping (`cma.rs`) and tells
//!    whether all of them worked.
//!
//! After 3 the maker closes its descriptor (and unlinks a named file): once every peer has
//! attached nothing names the memory, so no exit, crash or SIGKILL can leave it behind. Each
//! host decides from what every rank said, so all ranks of a host agree: shared memory, or TCP
//! with one warning line naming the peer and the reason (`DTCOMM_TRANSPORT=shm`: an error).

use std::time::{Duration, Instant};

use std::sync::Arc;

use super::group::ShmGroup;
use crate::call::{CallDesc, OpKind};
use crate::config::{Config, LinkKind};
use crate::dtype::DType;
use crate::engine::{Bufs, Engine};
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::schedule::ring;
use crate::transport::shm::host::{HostId, RECORD_LEN, pid_ns, record};
use crate::transport::shm::layout::{Layout, MAGIC, VERSION, hdr};
use crate::transport::shm::pipe::Pipes;
use crate::transport::shm::segment::{Created, Mapping, attach};

const ID_LEN: usize = RECORD_LEN;
const SEG_LEN: usize = 256;
const ACK_LEN: usize = 192;

/// What the set-up found: the host group (if shared memory is used) and the log line.
pub(crate) struct Found {
    /// This host's group, when its ranks share memory.
    pub group: Option<ShmGroup>,
    /// One line for the start-up log: which link each peer got and why.
    pub describe: String,
    /// Ranks on this host, this one included (whether or not they share memory).
    pub host_ranks: usize,
}

fn allgather(
    e: &mut Engine,
    world: usize,
    step: u64,
    mine: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, CommError> {
    let len = mine.len();
    let mut all = vec![0u8; len * world];
    let desc = CallDesc {
        op: OpKind::AllGather,
        dtype: DType::U8,
        redop: None,
        count: (len * world) as u64,
        root: None,
        // Out of the calls' sequence space, so user calls keep numbering from 0.
        seq: u64::MAX - step,
    };
    let sched = ring::allgather(e.rank, world, &vec![len; world], true);
    let mut bufs = Bufs {
        work: &mut all,
        input: mine,
    };
    e.run(&sched, &desc, ReduceOp::Sum, &mut bufs, timeout)?;
    Ok(all)
}

fn put_str(dst: &mut [u8], s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(dst.len());
    dst[..n].copy_from_slice(&b[..n]);
}

fn get_str(src: &[u8]) -> String {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..end]).into_owned()
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Writes the header of a fresh segment.
fn write_header(m: &Mapping, l: &Layout) {
    let mut h = [0u8; 32];
    h[hdr::MAGIC..hdr::MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
    h[hdr::VERSION..hdr::VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
    h[hdr::RANKS..hdr::RANKS + 4].copy_from_slice(&(l.ranks as u32).to_le_bytes());
    h[hdr::CHUNK..hdr::CHUNK + 8].copy_from_slice(&(l.chunk as u64).to_le_bytes());
    h[hdr::STRIDE..hdr::STRIDE + 8].copy_from_slice(&(l.stride() as u64).to_le_bytes());
    // SAFETY: the mapping holds at least a page; nobody else has it yet.
    unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), m.ptr(), h.len()) };
}

/// Checks an attached segment's header against what its maker announced.
fn check_header(m: &Mapping, l: &Layout) -> Result<(), String> {
    let mut h = [0u8; 32];
    // SAFETY: at least a page is mapped (`attach` checked the size).
    unsafe { std::ptr::copy_nonoverlapping(m.ptr(), h.as_mut_ptr(), h.len()) };
    if u64_at(&h, hdr::MAGIC) != MAGIC {
        return Err("not a dtcomm segment (bad magic)".into());
    }
    let v = u32::from_le_bytes(h[hdr::VERSION..hdr::VERSION + 4].try_into().expect("4"));
    if v != VERSION {
        return Err(format!(
            "segment layout version {v}, this build speaks {VERSION} (mixed dtcomm versions?)"
        ));
    }
    let ranks = u32::from_le_bytes(h[hdr::RANKS..hdr::RANKS + 4].try_into().expect("4"));
    if ranks as usize != l.ranks || u64_at(&h, hdr::CHUNK) as usize != l.chunk {
        return Err(format!(
            "segment is for {ranks} ranks of {} bytes, expected {} of {}",
            u64_at(&h, hdr::CHUNK),
            l.ranks,
            l.chunk
        ));
    }
    Ok(())
}

/// Every rank's host number (hosts numbered by their lowest rank) from the host records
/// `ids`: ranks with the same host digest share a host, and, when the segment is a memfd
/// (`memfd`: opened through `/proc/<pid>/fd`, which names the creator only in its own pid
/// namespace), the same pid namespace too.
fn hosts(ids: &[u8], world: usize, memfd: bool) -> Vec<usize> {
    let key_of = |r: usize| {
        let rec = &ids[r * ID_LEN..(r + 1) * ID_LEN];
        let ns = if memfd { u64_at(rec, 24) } else { 0 };
        (&rec[..16], ns)
    };
    let mut leaders: Vec<usize> = Vec::new();
    (0..world)
        .map(
            |r| match leaders.iter().position(|&l| key_of(l) == key_of(r)) {
                Some(h) => h,
                None => {
                    leaders.push(r);
                    leaders.len() - 1
                }
            },
        )
        .collect()
}

/// Runs the set-up on a freshly connected engine. `book`: every rank's host record from the
/// address book, when it holds them all (then step 1 is skipped). `Err` only for
/// `DTCOMM_TRANSPORT=shm` or a failure of the links themselves.
pub(crate) fn find(
    e: &mut Engine,
    world: usize,
    cfg: &Config,
    book: Option<&[Vec<u8>]>,
) -> Result<Found, CommError> {
    let rank = e.rank;
    let start = Instant::now();
    let timeout = cfg.setup_timeout.value;
    let want = cfg.transport.value != LinkKind::Tcp;
    let id = HostId::current(cfg.host_id.value.as_deref());
    let rec = record(&id, want);
    let from_book = book.filter(|b| b.len() == world && b.iter().all(|r| r.len() == ID_LEN));
    let ids = match from_book {
        Some(b) => {
            if b[rank] != rec {
                return Err(CommError::Setup {
                    rank,
                    elapsed: start.elapsed(),
                    detail: format!(
                        "the address book's host record for rank {rank} is not this process's \
                         (was it published by another process, or under other settings?)"
                    ),
                });
            }
            b.concat()
        }
        None => allgather(e, world, 0, &rec, timeout)?,
    };
    let memfd = cfg.shm_dir.value.is_none();
    let host_of = hosts(&ids, world, memfd);
    let nhosts = host_of.iter().max().map_or(1, |m| m + 1);
    let split: Vec<usize> = (0..world)
        .filter(|&r| host_of[r] != host_of[rank] && ids[r * ID_LEN..][..16] == rec[..16])
        .collect();
    if memfd && !split.is_empty() {
        tracing::info!(
            rank,
            ?split,
            "dtcomm: ranks {split:?} share this host but not its pid namespace: a memfd segment \
             cannot be opened across pid namespaces, so they link over TCP (DTCOMM_SHM_DIR on \
             a directory both see shares memory)"
        );
    }
    let mine = host_of[rank];
    let host_ranks: Vec<usize> = (0..world).filter(|&r| host_of[r] == mine).collect();
    let everyone_wants = host_ranks.iter().all(|&r| ids[r * ID_LEN + 20] == 1);
    let use_shm = host_ranks.len() > 1 && everyone_wants;
    let me = host_ranks.iter().position(|&r| r == rank).expect("self");
    let layout = Layout::new(host_ranks.len(), cfg.shm_chunk.value);

    // 2. The host's lowest rank makes the segment.
    let mut seg = [0u8; SEG_LEN];
    let mut made: Option<Created> = None;
    let mut map: Option<Mapping> = None;
    if use_shm && me == 0 {
        let name = format!("dtcomm-{}-{}-{}", std::process::id(), rank, next_serial());
        match Created::new(layout.len(), cfg.shm_dir.value.as_deref(), &name) {
            Ok((c, m)) => {
                write_header(&m, &layout);
                seg[0] = 1;
                put_str(&mut seg[8..], &c.path);
                made = Some(c);
                map = Some(m);
            }
            Err(err) => {
                seg[0] = 2;
                put_str(
                    &mut seg[8..],
                    &format!("rank {rank} could not make the segment: {err}"),
                );
            }
        }
    }
    let segs = allgather(e, world, 1, &seg, timeout)?;
    let leader = host_ranks[0];
    let lseg = &segs[leader * SEG_LEN..(leader + 1) * SEG_LEN];

    // 3. The others attach; everyone says how it went.
    let mut ack = [0u8; ACK_LEN];
    if use_shm {
        match (lseg[0], map.is_some()) {
            (1, true) => {
                ack[0] = 1;
                ack[16..24]
                    .copy_from_slice(&(map.as_ref().expect("made").ptr() as u64).to_le_bytes());
            }
            (1, false) => {
                let path = get_str(&lseg[8..]);
                match attach(&path, layout.len())
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        check_header(&m, &layout)?;
                        Ok(m)
                    }) {
                    Ok(m) => {
                        ack[0] = 1;
                        ack[16..24].copy_from_slice(&(m.ptr() as u64).to_le_bytes());
                        map = Some(m);
                    }
                    Err(err) => {
                        ack[0] = 2;
                        put_str(
                            &mut ack[24..],
                            &format!(
                                "rank {rank} could not attach rank {leader}'s segment {path}: {err}"
                            ),
                        );
                    }
                }
            }
            _ => {
                ack[0] = 2;
                put_str(&mut ack[24..], &get_str(&lseg[8..]));
            }
        }
    }
    let acks = allgather(e, world, 2, &ack, timeout)?;
    if let Some(mut c) = made {
        c.seal();
    }
    // 4. Single-copy reads: each rank reads every host peer's segment magic from the peer's
    //    own mapping (cross-memory attach); the host uses them only if every rank could.
    let pid_of = |r: usize| {
        let rec = &ids[r * ID_LEN..(r + 1) * ID_LEN];
        (u64_at(rec, 24) == pid_ns())
            .then(|| u32::from_le_bytes(rec[16..20].try_into().expect("4")))
    };
    let mut can = [0u8; 8];
    if use_shm && cfg.shm_single_copy.value {
        let all_ok = host_ranks.iter().all(|&r| acks[r * ACK_LEN] == 1);
        let ok = all_ok
            && host_ranks.iter().filter(|&&r| r != rank).all(|&r| {
                let addr = u64_at(&acks[r * ACK_LEN..(r + 1) * ACK_LEN], 16);
                let mut magic = [0u8; 8];
                pid_of(r).is_some_and(|pid| {
                    crate::transport::shm::cma::read(pid, addr, &mut magic).is_ok()
                        && u64::from_le_bytes(magic) == MAGIC
                })
            });
        can[0] = u8::from(ok);
    }
    let cans = allgather(e, world, 3, &can, timeout)?;
    let single_copy =
        use_shm && cfg.shm_single_copy.value && host_ranks.iter().all(|&r| cans[r * 8] == 1);

    // Every host's verdict, which every rank can compute alike from the exchanges.
    let host_ok = |h: usize| {
        let rs: Vec<usize> = (0..world).filter(|&r| host_of[r] == h).collect();
        rs.len() > 1
            && rs
                .iter()
                .all(|&r| ids[r * ID_LEN + 20] == 1 && acks[r * ACK_LEN] == 1)
    };
    let across = (nhosts > 1
        && (0..nhosts).all(|h| {
            host_ok(h) && host_of.iter().filter(|&&x| x == h).count() == host_ranks.len()
        }))
    .then(|| {
        let peers = (0..nhosts)
            .map(|h| {
                (0..world)
                    .filter(|&r| host_of[r] == h)
                    .nth(me)
                    .expect("same size")
            })
            .collect();
        (mine, peers)
    });
    let failed: Option<String> = host_ranks
        .iter()
        .map(|&r| &acks[r * ACK_LEN..(r + 1) * ACK_LEN])
        .find(|a| a[0] != 1)
        .map(|a| get_str(&a[24..]));
    let peers: Vec<usize> = host_ranks.iter().copied().filter(|&r| r != rank).collect();
    let remote = world - host_ranks.len();
    let others = if remote > 0 {
        format!(", tcp to {remote} rank(s) on {} other host(s)", nhosts - 1)
    } else {
        String::new()
    };
    let mut describe = format!(
        "rank {rank} on {} (hosts {})",
        id.describe,
        if from_book.is_some() {
            "from the address book"
        } else {
            "exchanged over the links"
        }
    );
    let group = match (use_shm, failed) {
        (true, None) => {
            let pids: Vec<Option<u32>> = host_ranks.iter().map(|&r| pid_of(r)).collect();
            describe += &format!(
                ": shm to ranks {peers:?} (same host; {} KiB per rank){others}",
                layout.per_rank() / 1024
            );
            if across.is_some() {
                describe += "; allreduce across hosts: shm within, tcp between";
            }
            let map = Arc::new(map.expect("attached"));
            let pipes = Pipes::new(map.clone(), layout, me, host_ranks.clone(), world, &pids);
            e.links.install_pipes(pipes, world);
            let mut g = ShmGroup::new(map, layout, me, host_ranks.clone(), &pids, cfg.spin.value);
            g.across = across;
            if single_copy {
                g.single_copy = pids.iter().copied().collect();
                describe += "; large allreduces read peers' buffers in one copy";
            }
            Some(g)
        }
        (true, Some(why)) => {
            if cfg.transport.value == LinkKind::Shm {
                return Err(CommError::Setup {
                    rank,
                    elapsed: start.elapsed(),
                    detail: format!("DTCOMM_TRANSPORT=shm but shared memory failed: {why}"),
                });
            }
            tracing::warn!(rank, "dtcomm: shared memory unavailable, using TCP: {why}");
            describe += &format!(
                ": tcp to same-host ranks {peers:?} (shared memory failed: {why}){others}"
            );
            None
        }
        (false, _) => {
            if cfg.transport.value == LinkKind::Shm && !peers.is_empty() {
                return Err(CommError::Setup {
                    rank,
                    elapsed: start.elapsed(),
                    detail: "DTCOMM_TRANSPORT=shm but some ranks of this host chose tcp".into(),
                });
            }
            let why = if peers.is_empty() {
                "no other rank on this host".to_owned()
            } else if !want {
                "DTCOMM_TRANSPORT=tcp".to_owned()
            } else {
                "a rank of this host asked for tcp".to_owned()
            };
            if !peers.is_empty() {
                describe += &format!(": tcp to same-host ranks {peers:?} ({why})");
            } else {
                describe += &format!(" ({why})");
            }
            describe += &others;
            None
        }
    };
    Ok(Found {
        group,
        describe,
        host_ranks: host_ranks.len(),
    })
}

fn next_serial() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(digest: u8, pid_ns: u64) -> Vec<u8> {
        let mut r = vec![0u8; ID_LEN];
        r[..16].fill(digest);
        r[24..32].copy_from_slice(&pid_ns.to_le_bytes());
        r
    }

    #[test]
    fn ranks_in_another_pid_namespace_share_a_host_only_through_named_files() {
        // Ranks 0, 1, 3 on host A (rank 3 in another pid namespace: a container of the same
        // pod), rank 2 on host B.
        let ids = [rec(1, 10), rec(1, 10), rec(2, 10), rec(1, 11)].concat();
        assert_eq!(
            hosts(&ids, 4, true),
            vec![0, 0, 1, 2],
            "memfd: /proc/<pid> differs"
        );
        assert_eq!(
            hosts(&ids, 4, false),
            vec![0, 0, 1, 0],
            "DTCOMM_SHM_DIR: one host"
        );
    }

    #[test]
    fn a_segment_of_another_layout_version_is_refused_by_name() {
        let l = Layout::new(2, 4096);
        let (_c, m) = Created::new(l.len(), None, "dtcomm-hdr-test").unwrap();
        write_header(&m, &l);
        assert_eq!(check_header(&m, &l), Ok(()));
        let other = Layout::new(3, 4096);
        assert!(
            check_header(&m, &other)
                .unwrap_err()
                .contains("for 2 ranks")
        );
        // SAFETY: the test owns the mapping; bump the version field.
        unsafe { *m.ptr().add(hdr::VERSION) = 99 };
        let e = check_header(&m, &l).unwrap_err();
        assert!(
            e.contains("version 99") && e.contains("mixed dtcomm versions"),
            "{e}"
        );
        // SAFETY: as above; break the magic.
        unsafe { *m.ptr() = 0 };
        assert!(check_header(&m, &l).unwrap_err().contains("bad magic"));
    }
}
