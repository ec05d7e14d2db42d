//! The one place configuration is read. Precedence: explicit [`Options`] field, then the
//! `DTCOMM_*` environment variable, then the default. Every resolved value remembers where it
//! came from, and [`Config`]'s `Display` is the start-up log line.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use crate::device::CudaMode;

dt_rdzv_proto::wire_enum! {
    /// Which algorithm family the engine uses (`DTCOMM_ALGO`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Algo {
        /// Choose by message size and world size.
        Auto => "auto" | "",
        /// Bandwidth-optimal: ring allreduce (reduce-scatter + allgather), pipelined chain
        /// broadcast, ring allgather.
        Ring => "ring" | "chain",
        /// Latency-optimal: recursive-doubling allreduce (what `Auto` picks for small messages),
        /// binomial-tree broadcast, Bruck's allgather.
        Doubling => "doubling" | "rd" | "recursive_doubling",
        /// Tree allreduce: binomial reduce to rank 0 then binomial broadcast (a real tree; half
        /// the links of doubling per step); binomial-tree broadcast.
        Tree => "tree",
        /// Allreduce as a reduce-scatter and an allgather with every peer at once (two steps);
        /// other collectives as under `Auto`.
        Direct => "direct",
    }
    const ALL;
    /// The name `DTCOMM_ALGO` takes.
    const fn name;
    /// Parses `DTCOMM_ALGO` in any case; the empty string is `Auto`.
    impl FromStr for "algorithm";
}

dt_rdzv_proto::wire_enum! {
    /// Which links same-host peers use (`DTCOMM_TRANSPORT`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LinkKind {
        /// Shared memory between ranks of one host when every one of them can attach, TCP
        /// otherwise (with one warning line saying why).
        Auto => "auto" | "",
        /// TCP between every pair of ranks.
        Tcp => "tcp",
        /// Shared memory between ranks of one host, or fail at start-up saying why not.
        Shm => "shm",
    }
    const ALL;
    /// The name `DTCOMM_TRANSPORT` takes.
    const fn name;
    /// Parses `DTCOMM_TRANSPORT` in any case; the empty string is `Auto`.
    impl FromStr for "transport";
}

/// A launcher's secret for the store path's links (`DTCOMM_LINK_SECRET`, hex, at least 16
/// bytes): the ranks prove membership with it instead of a secret rank 0 publishes in the
/// store, so reading the store is not enough to join. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkSecret(Vec<u8>);

impl LinkSecret {
    /// The secret's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<[u8; 32]> for LinkSecret {
    fn from(b: [u8; 32]) -> Self {
        LinkSecret(b.to_vec())
    }
}

impl fmt::Debug for LinkSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkSecret(..)")
    }
}

impl FromStr for LinkSecret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || "must be hex digits (at least 32: 16 bytes)".to_owned();
        if s.len() < 32 || !s.len().is_multiple_of(2) {
            return Err(bad());
        }
        (0..s.len())
            .step_by(2)
            .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<Vec<u8>>>()
            .map(LinkSecret)
            .ok_or_else(bad)
    }
}

/// Explicit settings; a `Some` field wins over the environment.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Deadline of every connect, handshake and call (`DTCOMM_TIMEOUT`, seconds; default 300).
    pub timeout: Option<Duration>,
    /// Deadline of the set-up alone: meeting the other ranks, exchanging addresses, linking
    /// (`DTCOMM_SETUP_TIMEOUT`, seconds; else `horovodrun`'s `HOROVOD_GLOO_TIMEOUT_SECONDS`,
    /// what its `--gloo-timeout-seconds` sets: how long gloo waits for every rank to connect;
    /// default: the timeout). A short call deadline that catches a hang early need not fail a
    /// job whose ranks start a few seconds apart.
    pub setup_timeout: Option<Duration>,
    /// Algorithm override (`DTCOMM_ALGO`: `auto`, `ring`, `doubling`, `tree`, `direct`).
    pub algo: Option<Algo>,
    /// Interfaces to bind and advertise, NCCL syntax (`DTCOMM_SOCKET_IFNAME`: `eth0,ib`,
    /// `^docker,lo`, `=eth0` for an exact name).
    pub socket_ifname: Option<String>,
    /// TCP data streams per peer (`DTCOMM_NSOCKS_PERPEER`, default 1, at most 16).
    pub nsocks_perpeer: Option<usize>,
    /// Kernel socket buffer size in bytes, set before connecting (`DTCOMM_SOCKET_BUFSIZE`;
    /// default 4 MiB; `0` leaves the kernel's autotuning). Linux caps it at
    /// `net.core.wmem_max`/`rmem_max` and doubles it.
    pub socket_bufsize: Option<usize>,
    /// Microseconds to spin before parking in a wait (`DTCOMM_SPIN_US`, default 200).
    pub spin_us: Option<u64>,
    /// Messages up to this many bytes use the latency-optimal algorithm under `auto`
    /// (`DTCOMM_TREE_THRESHOLD`, default 32768).
    pub tree_threshold: Option<usize>,
    /// Key prefix in the store, so several communicators can share one
    /// (`DTCOMM_STORE_PREFIX`, default `dtcomm`).
    pub store_prefix: Option<String>,
    /// Links between ranks of one host (`DTCOMM_TRANSPORT`: `auto`, `tcp`, `shm`).
    pub transport: Option<LinkKind>,
    /// Bytes of each of a rank's two shared-memory buffers (`DTCOMM_SHM_CHUNK`, default
    /// 1 MiB, rounded up to pages): a rank of a host group holds `2 × chunk + 4 KiB`.
    pub shm_chunk: Option<usize>,
    /// Make shared-memory segments as files in this directory (`DTCOMM_SHM_DIR`, e.g.
    /// `/dev/shm` when ranks of one host cannot see each other's `/proc`); default: anonymous
    /// memfds, which leave nothing behind.
    pub shm_dir: Option<String>,
    /// This rank's host identity (`DTCOMM_HOST_ID`); default: the kernel's boot id with the
    /// network and IPC namespaces. Ranks with equal identities share memory.
    pub host_id: Option<String>,
    /// Large same-host allreduces read peers' buffers in one kernel copy (cross-memory attach)
    /// when every rank of the host may (`DTCOMM_SHM_SINGLE_COPY=1`). Default `0`: copies
    /// through the segment, which measured twice as fast on the (virtualised) machines we
    /// benchmark on; see docs/shared-memory.md.
    pub shm_single_copy: Option<bool>,
    /// How device buffers are carried (`DTCOMM_CUDA`: `auto`, `nccl`, `stage`, `off`).
    pub cuda: Option<CudaMode>,
    /// Before each NCCL call, compare (op, dtype, count, root, seq) across ranks over dtcomm's
    /// links, since NCCL hangs on a mismatch (`DTCOMM_NCCL_CHECK=1`; default off: it costs
    /// one small all-gather per call).
    pub nccl_check: Option<bool>,
    /// Ranks per NCCL bootstrap root (`DTCOMM_NCCL_RANKS_PER_ROOT`, else torch's
    /// `TORCH_NCCL_RANKS_PER_ROOT`; default 128, as torch's): a device communicator of more
    /// ranks is set up from one unique id per this many ranks (`ncclCommInitRankScalable`,
    /// NCCL 2.23) instead of one root for all; 0: always one.
    pub nccl_ranks_per_root: Option<usize>,
    /// The store path's link secret from the launcher (`DTCOMM_LINK_SECRET`; `dtrun` and the
    /// torchrun handler derive it from the job token and round); default: rank 0 draws one
    /// and publishes it in the store.
    pub link_secret: Option<LinkSecret>,
}

/// Where a resolved value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// An explicit [`Options`] field.
    Explicit,
    /// This environment variable.
    Env(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Explicit => f.write_str("explicit"),
            Source::Env(v) => f.write_str(v),
        }
    }
}

/// A resolved value and its provenance.
#[derive(Debug, Clone)]
pub struct Setting<T> {
    /// The value in force.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

/// The resolved configuration of one communicator.
#[derive(Debug, Clone)]
pub struct Config {
    /// See [`Options::timeout`].
    pub timeout: Setting<Duration>,
    /// See [`Options::setup_timeout`].
    pub setup_timeout: Setting<Duration>,
    /// See [`Options::algo`].
    pub algo: Setting<Algo>,
    /// See [`Options::socket_ifname`] (`None`: first non-loopback interface, else loopback).
    pub socket_ifname: Setting<Option<String>>,
    /// See [`Options::nsocks_perpeer`].
    pub nsocks_perpeer: Setting<usize>,
    /// See [`Options::socket_bufsize`].
    pub socket_bufsize: Setting<Option<usize>>,
    /// See [`Options::spin_us`].
    pub spin: Setting<Duration>,
    /// See [`Options::tree_threshold`].
    pub tree_threshold: Setting<usize>,
    /// See [`Options::store_prefix`].
    pub store_prefix: Setting<String>,
    /// See [`Options::transport`].
    pub transport: Setting<LinkKind>,
    /// See [`Options::shm_chunk`].
    pub shm_chunk: Setting<usize>,
    /// See [`Options::shm_dir`].
    pub shm_dir: Setting<Option<String>>,
    /// See [`Options::host_id`].
    pub host_id: Setting<Option<String>>,
    /// See [`Options::shm_single_copy`].
    pub shm_single_copy: Setting<bool>,
    /// See [`Options::cuda`].
    pub cuda: Setting<CudaMode>,
    /// See [`Options::nccl_check`].
    pub nccl_check: Setting<bool>,
    /// See [`Options::nccl_ranks_per_root`].
    pub nccl_ranks_per_root: Setting<usize>,
    /// See [`Options::link_secret`].
    pub link_secret: Setting<Option<LinkSecret>>,
}

fn pick<T>(
    explicit: Option<T>,
    var: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
    default: T,
) -> Result<Setting<T>, String> {
    if let Some(value) = explicit {
        return Ok(Setting {
            value,
            source: Source::Explicit,
        });
    }
    match std::env::var(var) {
        Ok(s) if !s.trim().is_empty() => {
            let value = parse(s.trim()).map_err(|e| format!("{var}={s:?}: {e}"))?;
            Ok(Setting {
                value,
                source: Source::Env(var),
            })
        }
        _ => Ok(Setting {
            value: default,
            source: Source::Default,
        }),
    }
}

fn flag(s: &str) -> Result<bool, String> {
    match s {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("must be 0 or 1".into()),
    }
}

fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = num(s)?;
    if secs.is_finite() && secs > 0.0 {
        crate::secs::limit(secs)
    } else {
        Err("must be a positive number of seconds".into())
    }
}

fn num<T: FromStr>(s: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    s.parse::<T>().map_err(|e| e.to_string())
}

impl Config {
    /// Resolves `opts` against the environment. Errors name the variable and its bad value.
    pub fn resolve(opts: &Options) -> Result<Config, String> {
        let timeout = pick(
            opts.timeout,
            "DTCOMM_TIMEOUT",
            seconds,
            Duration::from_secs(300),
        )?;
        let mut setup_timeout = pick(
            opts.setup_timeout,
            "DTCOMM_SETUP_TIMEOUT",
            seconds,
            timeout.value,
        )?;
        if setup_timeout.source == Source::Default {
            // Horovod's knob for the same wait (its gloo context's connect), where set.
            setup_timeout = pick(None, "HOROVOD_GLOO_TIMEOUT_SECONDS", seconds, timeout.value)?;
        }
        if setup_timeout.source == Source::Default {
            // The set-up's deadline is the timeout unless told otherwise: say where that came from.
            setup_timeout.source = timeout.source;
        }
        let nsocks = pick(opts.nsocks_perpeer, "DTCOMM_NSOCKS_PERPEER", num, 1)?;
        if !(1..=16).contains(&nsocks.value) {
            return Err(format!("nsocks_perpeer {} is outside 1..=16", nsocks.value));
        }
        Ok(Config {
            timeout,
            setup_timeout,
            algo: pick(opts.algo, "DTCOMM_ALGO", Algo::from_str, Algo::Auto)?,
            socket_ifname: pick(
                opts.socket_ifname.clone().map(Some),
                "DTCOMM_SOCKET_IFNAME",
                |s| Ok(Some(s.to_owned())),
                None,
            )?,
            nsocks_perpeer: nsocks,
            socket_bufsize: pick(
                opts.socket_bufsize.map(|v| (v > 0).then_some(v)),
                "DTCOMM_SOCKET_BUFSIZE",
                |s| num::<usize>(s).map(|v| (v > 0).then_some(v)),
                Some(4 << 20),
            )?,
            spin: pick(
                opts.spin_us.map(Duration::from_micros),
                "DTCOMM_SPIN_US",
                |s| num(s).map(Duration::from_micros),
                Duration::from_micros(200),
            )?,
            tree_threshold: pick(opts.tree_threshold, "DTCOMM_TREE_THRESHOLD", num, 32 << 10)?,
            store_prefix: pick(
                opts.store_prefix.clone(),
                "DTCOMM_STORE_PREFIX",
                |s| Ok(s.to_owned()),
                "dtcomm".to_owned(),
            )?,
            transport: pick(
                opts.transport,
                "DTCOMM_TRANSPORT",
                LinkKind::from_str,
                LinkKind::Auto,
            )?,
            shm_chunk: pick(
                opts.shm_chunk,
                "DTCOMM_SHM_CHUNK",
                |s| match num::<usize>(s)? {
                    0 => Err("must be positive".into()),
                    v if v > 1 << 30 => Err("at most 1 GiB".into()),
                    v => Ok(v),
                },
                1 << 20,
            )?,
            shm_dir: pick(
                opts.shm_dir.clone().map(Some),
                "DTCOMM_SHM_DIR",
                |s| Ok(Some(s.to_owned())),
                None,
            )?,
            host_id: pick(
                opts.host_id.clone().map(Some),
                "DTCOMM_HOST_ID",
                |s| Ok(Some(s.to_owned())),
                None,
            )?,
            shm_single_copy: pick(opts.shm_single_copy, "DTCOMM_SHM_SINGLE_COPY", flag, false)?,
            cuda: pick(opts.cuda, "DTCOMM_CUDA", CudaMode::from_str, CudaMode::Auto)?,
            nccl_check: pick(opts.nccl_check, "DTCOMM_NCCL_CHECK", flag, false)?,
            nccl_ranks_per_root: match pick(
                opts.nccl_ranks_per_root,
                "DTCOMM_NCCL_RANKS_PER_ROOT",
                num,
                128,
            )? {
                s if s.source == Source::Default => {
                    pick(None, "TORCH_NCCL_RANKS_PER_ROOT", num, 128)?
                }
                s => s,
            },
            link_secret: pick(
                opts.link_secret.clone().map(Some),
                "DTCOMM_LINK_SECRET",
                |s| s.parse().map(Some),
                None,
            )?,
        })
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timeout={:?} ({}) setup_timeout={:?} ({}) algo={} ({}) socket_ifname={} ({}) nsocks_perpeer={} ({}) \
             socket_bufsize={} ({}) spin={:?} ({}) tree_threshold={} ({}) store_prefix={} ({}) \
             transport={} ({}) shm_chunk={} ({}) shm_dir={} ({}) host_id={} ({}) \
             shm_single_copy={} ({}) cuda={} ({}) nccl_check={} ({}) nccl_ranks_per_root={} ({}) \
             link_secret={} ({})",
            self.timeout.value,
            self.timeout.source,
            self.setup_timeout.value,
            self.setup_timeout.source,
            self.algo.value,
            self.algo.source,
            self.socket_ifname.value.as_deref().unwrap_or("auto"),
            self.socket_ifname.source,
            self.nsocks_perpeer.value,
            self.nsocks_perpeer.source,
            self.socket_bufsize
                .value
                .map_or_else(|| "kernel".to_owned(), |v| v.to_string()),
            self.socket_bufsize.source,
            self.spin.value,
            self.spin.source,
            self.tree_threshold.value,
            self.tree_threshold.source,
            self.store_prefix.value,
            self.store_prefix.source,
            self.transport.value,
            self.transport.source,
            self.shm_chunk.value,
            self.shm_chunk.source,
            self.shm_dir.value.as_deref().unwrap_or("memfd"),
            self.shm_dir.source,
            self.host_id.value.as_deref().unwrap_or("kernel"),
            self.host_id.source,
            u8::from(self.shm_single_copy.value),
            self.shm_single_copy.source,
            self.cuda.value,
            self.cuda.source,
            u8::from(self.nccl_check.value),
            self.nccl_check.source,
            self.nccl_ranks_per_root.value,
            self.nccl_ranks_per_root.source,
            if self.link_secret.value.is_some() {
                "launcher"
            } else {
                "store"
            },
            self.link_secret.source,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_wins_and_provenance_is_kept() {
        let opts = Options {
            timeout: Some(Duration::from_secs(7)),
            algo: Some(Algo::Ring),
            ..Options::default()
        };
        let c = Config::resolve(&opts).unwrap();
        assert_eq!(c.timeout.value, Duration::from_secs(7));
        assert_eq!(c.timeout.source, Source::Explicit);
        assert_eq!(c.algo.value, Algo::Ring);
        let line = c.to_string();
        assert!(line.contains("timeout=7s (explicit)"), "{line}");
        assert!(line.contains("setup_timeout=7s (explicit)"), "{line}");
        assert_eq!(c.setup_timeout.value, Duration::from_secs(7));
        let opts = Options {
            timeout: Some(Duration::from_secs(3)),
            setup_timeout: Some(Duration::from_secs(60)),
            ..Options::default()
        };
        let c = Config::resolve(&opts).unwrap();
        assert_eq!(c.timeout.value, Duration::from_secs(3));
        assert_eq!(c.setup_timeout.value, Duration::from_secs(60));
        assert!("bogus".parse::<Algo>().is_err());
        assert!(line.contains("link_secret=store (default)"), "{line}");
    }

    #[test]
    fn link_secrets_are_hex_and_never_printed() {
        let s: LinkSecret = "00112233445566778899aabbccddeeff".parse().unwrap();
        assert_eq!(s.bytes().len(), 16);
        assert_eq!(format!("{s:?}"), "LinkSecret(..)");
        assert!("0011".parse::<LinkSecret>().is_err());
        assert!(
            "zz112233445566778899aabbccddeeff"
                .parse::<LinkSecret>()
                .is_err()
        );
        let opts = Options {
            link_secret: Some(s),
            ..Options::default()
        };
        let c = Config::resolve(&opts).unwrap();
        let shown = format!("{c} {c:?}");
        assert!(shown.contains("link_secret=launcher (explicit)"), "{shown}");
        assert!(!shown.contains("8899aabb"), "{shown}");
    }

    #[test]
    fn algo_and_transport_tables_parse_every_spelling() {
        for &(a, spellings) in Algo::SPELLINGS {
            assert_eq!(spellings[0], a.to_string());
            for s in spellings {
                assert_eq!(s.parse::<Algo>(), Ok(a), "{s}");
                assert_eq!(s.to_ascii_uppercase().parse::<Algo>(), Ok(a), "{s}");
            }
        }
        assert_eq!(Algo::ALL.len(), Algo::SPELLINGS.len());
        assert_eq!("RD".parse::<Algo>(), Ok(Algo::Doubling));
        assert_eq!(
            "Bogus".parse::<Algo>(),
            Err("unknown algorithm \"bogus\" (auto, ring, doubling, tree, direct)".to_string())
        );
        for &(l, spellings) in LinkKind::SPELLINGS {
            assert_eq!(spellings[0], l.to_string());
            for s in spellings {
                assert_eq!(s.parse::<LinkKind>(), Ok(l), "{s}");
                assert_eq!(s.to_ascii_uppercase().parse::<LinkKind>(), Ok(l), "{s}");
            }
        }
        assert_eq!(LinkKind::ALL.len(), LinkKind::SPELLINGS.len());
        assert_eq!("".parse::<LinkKind>(), Ok(LinkKind::Auto));
        assert_eq!(
            "udp".parse::<LinkKind>(),
            Err("unknown transport \"udp\" (auto, tcp, shm)".to_string())
        );
    }
}
