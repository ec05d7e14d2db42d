//! nccl-tests style benchmarks of dtcomm's collectives over TCP.
//!
//! ```text
//! all_reduce_perf --world 2 -b 8 -e 64M -f 2 [-n 20] [-w 5] [-d float] [-o sum] [--json out.json]
//! all_reduce_perf --store HOST:PORT --rank R --world N ...     # join a running dt-rdzv serve
//! all_reduce_perf --device cuda --world 1 ...                   # device buffers (device.rs)
//! ```
//!
//! With `--world N` and no `--rank`, the binary starts an in-process `dt-rdzv` server on a
//! loopback port and launches N copies of itself as ranks; rank 0 prints the table. With
//! `--rank`, it is one rank and finds the others through the store at `--store`. Settings of
//! the engine come from the environment (`DTCOMM_ALGO`, `DTCOMM_SOCKET_IFNAME`, ...).

pub mod device;
mod run;
pub mod table;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use dt_rdzv::client::TcpStoreClient;
use dtcomm::{Communicator, DType, Options, ReduceOp};
use half::{bf16, f16};

use device::{Gpu, Place};
use run::{BenchElem, Measured, Spec, measure};
use table::{Cell, Row};

/// The collective a binary measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    /// `all_reduce_perf`.
    AllReduce,
    /// `broadcast_perf`.
    Broadcast,
    /// `reduce_perf`.
    Reduce,
    /// `all_gather_perf`.
    AllGather,
    /// `reduce_scatter_perf`.
    ReduceScatter,
    /// `alltoall_perf`.
    AllToAll,
    /// `sendrecv_perf`: ranks pair up (0-1, 2-3, ...) and exchange in turn (the even rank
    /// sends then receives, the odd one receives then sends); a ping-pong, so the bus
    /// bandwidth counts both directions: 2 × size per call's time.
    SendRecv,
}

impl Collective {
    fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce_perf",
            Collective::Broadcast => "broadcast_perf",
            Collective::Reduce => "reduce_perf",
            Collective::AllGather => "all_gather_perf",
            Collective::ReduceScatter => "reduce_scatter_perf",
            Collective::AllToAll => "alltoall_perf",
            Collective::SendRecv => "sendrecv_perf",
        }
    }
    /// nccl-tests' bus bandwidth factor.
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce => 1.0,
            Collective::SendRecv => 2.0,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
        }
    }
    fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        )
    }
    fn rooted(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }
    /// Whether the element count must be a multiple of the world size.
    fn per_rank_blocks(self) -> bool {
        matches!(
            self,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll
        )
    }
}

/// Command line, with nccl-tests' short flags.
#[derive(Debug, Clone, Parser)]
#[command(about = "nccl-tests style benchmark of a dtcomm collective over TCP")]
pub struct Args {
    /// Smallest message size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    pub minbytes: String,
    /// Largest message size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    pub maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub stepfactor: usize,
    /// Fixed increment between sizes (overrides -f).
    #[arg(short = 'i', long = "stepbytes")]
    pub stepbytes: Option<String>,
    /// Explicit comma-separated sizes (e.g. `8,1K,64K,1M,16M,64M`), instead of -b/-e/-f/-i.
    #[arg(long)]
    pub sizes: Option<String>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Use the incumbent harness's per-size schedule of warm-up and iterations instead of -n/-w
    /// (`benches/incumbents/common.py`: <=1K: 100/2000, <=64K: 20/500, <=1M: 10/100,
    /// <=16M: 5/20, <=64M: 3/10, else 2/5).
    #[arg(long)]
    pub anchor_schedule: bool,
    /// Data type (float, double, half, bfloat16, int8, uint8, int32, int64).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Reduction (sum, prod, min, max, avg).
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Root of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// This rank (join mode; needs --store).
    #[arg(long)]
    pub rank: Option<usize>,
    /// `host:port` of a running `dt-rdzv serve` (or TCPStore) to meet the other ranks at.
    #[arg(long)]
    pub store: Option<String>,
    /// Write the results as JSON to this file (`-` for stdout instead of the table).
    #[arg(short = 'J', long = "json")]
    pub json: Option<String>,
    /// Launcher deadline in seconds for all ranks to finish.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Where the buffers are: host, cuda (a GPU: NCCL or host staging, as `DTCOMM_CUDA`
    /// says; dt-bench built with `--features cuda`) or twin (dtcomm's in-memory GPU twin).
    #[arg(long, default_value = "host")]
    pub device: String,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1usize << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<f64>()
        .map(|v| (v * mult as f64) as usize)
        .map_err(|e| format!("size {s:?}: {e}"))
}

fn anchor_schedule(bytes: usize) -> (usize, usize) {
    match bytes {
        b if b <= 1 << 10 => (100, 2000),
        b if b <= 64 << 10 => (20, 500),
        b if b <= 1 << 20 => (10, 100),
        b if b <= 16 << 20 => (5, 20),
        b if b <= 64 << 20 => (3, 10),
        _ => (2, 5),
    }
}

/// Entry point of every `*_perf` binary; returns the process exit code.
pub fn main(coll: Collective) -> i32 {
    let args = Args::parse();
    match (&args.rank, &args.store) {
        (Some(rank), Some(store)) => match rank_main(coll, &args, *rank, store) {
            Ok(wrong) => i32::from(wrong > 0),
            Err(e) => {
                eprintln!("{}: rank {rank}: {e}", coll.name());
                2
            }
        },
        (None, None) => launch(&args),
        _ => {
            eprintln!(
                "--rank and --store go together (join mode); without both, --world N launches the ranks"
            );
            2
        }
    }
}

fn launch(args: &Args) -> i32 {
    let server = match dt_rdzv::server::BackgroundServer::start(
        dt_rdzv::server::ServeConfig::loopback_ephemeral(),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("starting the in-process dt-rdzv server: {e}");
            return 2;
        }
    };
    let exe = std::env::current_exe().expect("current_exe");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut kids = Vec::new();
    for r in 0..args.world {
        let mut cmd = Command::new(&exe);
        cmd.args(&argv)
            .args(["--rank", &r.to_string(), "--store", &server.endpoint()]);
        cmd.stdout(if r == 0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        match cmd.spawn() {
            Ok(k) => kids.push(k),
            Err(e) => {
                eprintln!("spawning rank {r}: {e}");
                for mut k in kids {
                    let _ = k.kill();
                    let _ = k.wait();
                }
                return 2;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut code = 0;
    let mut pending: Vec<_> = kids.into_iter().enumerate().collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (r, mut k) in pending {
            match k.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() {
                        eprintln!("rank {r} exited with {st}");
                        code = st.code().unwrap_or(2).max(1);
                    }
                }
                Ok(None) if Instant::now() > deadline => {
                    eprintln!("rank {r} still running after {}s: killing it", args.timeout);
                    let _ = k.kill();
                    let _ = k.wait();
                    code = 2;
                }
                _ => still.push((r, k)),
            }
        }
        pending = still;
        std::thread::sleep(Duration::from_millis(5));
    }
    code
}

fn rank_main(coll: Collective, args: &Args, rank: usize, store: &str) -> Result<u64, String> {
    let dtype = DType::parse(&args.datatype)
        .ok_or_else(|| format!("unknown datatype {:?}", args.datatype))?;
    let op = ReduceOp::parse(&args.op).ok_or_else(|| format!("unknown op {:?}", args.op))?;
    let min = parse_size(&args.minbytes)?;
    let max = parse_size(&args.maxbytes)?;
    let step = args.stepbytes.as_deref().map(parse_size).transpose()?;
    let client =
        TcpStoreClient::connect(store, Duration::from_secs(60)).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let comm = Communicator::new(Arc::new(client), rank, args.world, Options::default())
        .map_err(|e| e.to_string())?;
    let setup = t0.elapsed();
    let place = Place::parse(&args.device)?;
    let gpu = match place {
        Place::Host => None,
        _ => Some(Gpu::open(place, &comm)?),
    };
    let world = comm.world();
    let root = if coll.rooted() { args.root } else { 0 };
    let show = rank == 0 && args.json.as_deref() != Some("-");
    if show {
        print_preamble(coll, args, &comm, gpu.as_ref(), min, max, step, setup);
    }
    let mut rows = Vec::new();
    let es = dtype.size();
    let sizes: Vec<usize> = match &args.sizes {
        Some(list) => list.split(',').map(parse_size).collect::<Result<_, _>>()?,
        None => {
            let mut v = Vec::new();
            let mut size = min.max(1);
            while size <= max {
                v.push(size);
                size = match step {
                    Some(s) if s > 0 => size + s,
                    _ if args.stepfactor > 1 => size * args.stepfactor,
                    _ => break,
                };
            }
            v
        }
    };
    for size in sizes {
        let mut count = size / es;
        if coll.per_rank_blocks() {
            count = count / world * world;
        }
        if count > 0 {
            let (warm, iters) = if args.anchor_schedule {
                anchor_schedule(count * es)
            } else {
                (args.warmup, args.iters)
            };
            let mut cells = [None, None];
            for (k, in_place) in [false, true].into_iter().enumerate() {
                let spec = Spec {
                    coll,
                    count,
                    op,
                    root,
                    in_place,
                    warm,
                    iters,
                    check: args.check != 0,
                };
                let m = dispatch(dtype, &comm, gpu.as_ref(), &spec)?;
                // Maximum over ranks, as nccl-tests reports it.
                let mut t = [m.avg_s, m.p50_s, m.wrong as f64];
                comm.all_reduce(&mut t, ReduceOp::Max)
                    .map_err(|e| e.to_string())?;
                let bytes = (count * es) as f64;
                let alg = bytes / t[0] / 1e9;
                cells[k] = Some(Cell {
                    time: t[0] * 1e6,
                    p50_us: t[1] * 1e6,
                    alg_bw: alg,
                    bus_bw: alg * coll.bus_factor(world),
                    wrong: (args.check != 0).then_some(t[2] as u64),
                });
            }
            let row = Row {
                size: count * es,
                count,
                dtype: dtype.name().to_owned(),
                redop: if coll.reduces() {
                    op.name().to_owned()
                } else {
                    "none".to_owned()
                },
                root: if coll.rooted() { root as i64 } else { -1 },
                out_of_place: cells[0].expect("measured"),
                in_place: cells[1].expect("measured"),
            };
            if show {
                println!("{}", table::row(&row));
            }
            rows.push(row);
        }
    }
    let wrong: u64 = rows
        .iter()
        .map(|r| r.out_of_place.wrong.unwrap_or(0) + r.in_place.wrong.unwrap_or(0))
        .sum();
    if rank == 0 {
        if show {
            let avg_bus = if rows.is_empty() {
                0.0
            } else {
                rows.iter().map(|r| r.in_place.bus_bw).sum::<f64>() / rows.len() as f64
            };
            println!(
                "# Out of bounds values : {wrong} {}",
                if wrong == 0 { "OK" } else { "FAILED" }
            );
            println!("# Avg bus bandwidth    : {avg_bus:.6}");
            println!("#");
            println!("# Collective test concluded: {}", coll.name());
        }
        if let Some(path) = &args.json {
            let doc = serde_json::json!({
                "collective": coll.name(),
                "world": world,
                "transport": comm.transport_description(),
                "device": gpu.as_ref().map(Gpu::describe),
                "config": comm.config().to_string(),
                "setup_s": setup.as_secs_f64(),
                "loadavg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
                "results": rows,
            });
            let text = serde_json::to_string_pretty(&doc).expect("json");
            if path == "-" {
                println!("{text}");
            } else if let Err(e) = std::fs::write(path, text) {
                return Err(format!("writing {path}: {e}"));
            }
        }
    }
    comm.barrier().map_err(|e| e.to_string())?;
    Ok(wrong)
}

fn dispatch(
    dtype: DType,
    c: &Communicator,
    gpu: Option<&Gpu>,
    spec: &Spec,
) -> Result<Measured, String> {
    fn go<T: BenchElem>(
        c: &Communicator,
        gpu: Option<&Gpu>,
        spec: &Spec,
    ) -> Result<Measured, String> {
        match gpu {
            None => measure::<T>(c, spec).map_err(|e| e.to_string()),
            Some(g) => device::measure::<T>(c, g, spec),
        }
    }
    match dtype {
        DType::F32 => go::<f32>(c, gpu, spec),
        DType::F64 => go::<f64>(c, gpu, spec),
        DType::F16 => go::<f16>(c, gpu, spec),
        DType::BF16 => go::<bf16>(c, gpu, spec),
        DType::I8 => go::<i8>(c, gpu, spec),
        DType::U8 => go::<u8>(c, gpu, spec),
        DType::I32 => go::<i32>(c, gpu, spec),
        DType::I64 => go::<i64>(c, gpu, spec),
        DType::I16 => go::<i16>(c, gpu, spec),
        DType::C64 | DType::C128 | DType::Bool => Err(format!(
            "the benchmark measures real and integer types, not {dtype}"
        )),
    }
}

#[allow(clippy::too_many_arguments)]
fn print_preamble(
    coll: Collective,
    args: &Args,
    comm: &Communicator,
    gpu: Option<&Gpu>,
    min: usize,
    max: usize,
    step: Option<usize>,
    setup: Duration,
) {
    let step_desc = match step {
        Some(s) => format!("{s}(bytes)"),
        None => format!("{}(factor)", args.stepfactor),
    };
    let (w, n) = if args.anchor_schedule {
        ("per-size".to_owned(), "per-size".to_owned())
    } else {
        (args.warmup.to_string(), args.iters.to_string())
    };
    println!(
        "# dtcomm {} (dt-bench {})",
        coll.name(),
        env!("CARGO_PKG_VERSION")
    );
    println!("# Collective test starting: {}", coll.name());
    println!(
        "# nThread 1 nGpus 1 minBytes {min} maxBytes {max} step: {step_desc} warmup iters: {w} iters: {n} agg iters: 1 validation: {} graph: 0",
        args.check
    );
    println!("#");
    println!("# Using devices");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    println!(
        "#  Rank  0 Group  0 Pid {:>6} on {} device  0 [{}] of {} ranks",
        std::process::id(),
        host.trim(),
        gpu.map_or_else(|| "cpu".to_owned(), Gpu::describe),
        comm.world()
    );
    let dtype = DType::parse(&args.datatype).unwrap_or(DType::F32);
    let algo = if coll == Collective::AllReduce {
        format!(
            ", allreduce algorithm: {} at {} B, {} at {} B",
            comm.all_reduce_algo((min / dtype.size()).max(1), dtype),
            min,
            comm.all_reduce_algo((max / dtype.size()).max(1), dtype),
            max
        )
    } else {
        String::new()
    };
    println!(
        "# dtcomm transport: {}{algo}; setup {:.1} ms",
        comm.transport_description(),
        setup.as_secs_f64() * 1e3
    );
    println!("# dtcomm config: {}", comm.config());
    println!("#");
    print!("{}", table::header());
}
