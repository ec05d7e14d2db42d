//! `rdzv_perf`: N members meet at a store barrier (connect, `add`, `wait` on a release key),
//! against `dt-rdzv serve` and against torch's own TCPStore server, in the same run, with the
//! same Rust client herd. Prints, per N, the time to release everyone for both servers (median
//! of `--rounds`), the ratio, and each server's resident memory with N members connected.
//!
//! With `--native`, N members meet through the native rendezvous instead (QUIC, from the first
//! connect to every member holding its rank and peers), beside the torchelastic way of meeting
//! (a compare-set loop on one value in torch's TCPStore); `--kill-one` measures the time from
//! SIGKILLing one member process to every survivor holding its new rank.
//!
//! ```text
//! rdzv_perf --members 64,256,1024,4096            # table
//! rdzv_perf --members 64,256,1024,4096 --json     # one JSON object per N
//! rdzv_perf --native --members 64,256,1024,4096 --json
//! rdzv_perf --native --kill-one --members 8 --json
//! rdzv_perf --native --freeze-one --members 8 --rounds 5
//! rdzv_perf --native --backend etcd --members 64,256,1024 --no-torch
//! ```
//!
//! With `--backend etcd` (`etcd` from Debian's `etcd-server` on `$PATH`, and a dt-rdzv built
//! with the `etcd` feature), the same native herd also forms against three `dt-rdzv serve`
//! sharing jobs through a three-member etcd started on loopback ports, in the same run,
//! interleaved with the single in-memory server. Every member gets the servers in one order;
//! with `--rotate`, in one of three rotations, so that two thirds of them reach a server that
//! does not own the job and are redirected to the one that does.
//!
//! These members hold no data plane: a loss is found by the heartbeat timeout. With the data
//! plane (training processes whose links report a reset), `benches/python/fault_recovery.py`
//! measures the same faults to the first completed allreduce after them.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use dt_bench::rdzv::{
    BENCH_TOKEN, EtcdCluster, Fault, ServerProcess, client_config, run_cas_herd, run_herd,
    run_kill_one, run_native_herd, run_node_herd, start_dt_rdzv, start_group, start_torch_store,
};
use dt_bench::stats::{median, median_range};
use dt_rdzv::native::ClientConfig;

#[derive(Parser)]
#[command(about = "store-barrier rendezvous: dt-rdzv serve beside torch's TCPStore")]
struct Args {
    /// Member counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096")]
    members: Vec<usize>,
    /// Rounds per N; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// One JSON object per N instead of a table.
    #[arg(long)]
    json: bool,
    /// The dt-rdzv binary (default: next to this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Python with torch, for torch's TCPStore server (default: $DTCOMM_VENV or ./.venv).
    #[arg(long)]
    python: Option<String>,
    /// Skip torch's server.
    #[arg(long)]
    no_torch: bool,
    /// Client runtime threads (the client herd shares the machine with the server). Default:
    /// 1 for the store barrier (plain TCP clients, light), 2 with --native (each member does
    /// a TLS handshake: on one thread the herd, standing in for N hosts, is the bottleneck).
    #[arg(long)]
    client_threads: Option<usize>,
    /// Give up on a round after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Native rendezvous (QUIC) beside the torchelastic compare-set barrier on torch's TCPStore.
    #[arg(long)]
    native: bool,
    /// With --native: SIGKILL one member and time the survivors' new round.
    #[arg(long, requires = "native")]
    kill_one: bool,
    /// With --native: SIGSTOP one member (a frozen host) and time the survivors' new round.
    #[arg(long, requires = "native", conflicts_with = "kill_one")]
    freeze_one: bool,
    /// With --native: most QUIC handshakes the herd has under way at once.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// With --native: every member connects (QUIC + TLS) first, then all join at once;
    /// `join_to_welcome_seconds` is then the server's formation alone, from the first join
    /// sent to the last member holding its rank and peers.
    #[arg(long, requires = "native")]
    preconnect: bool,
    /// With --native: ranks join through node agents, this many per node (one QUIC connection
    /// and one heartbeat per node); 0: one connection per rank.
    #[arg(long, requires = "native", conflicts_with_all = ["preconnect", "backend"], default_value_t = 0)]
    ranks_per_node: usize,
    /// With --native: skip the torchelastic barrier above this many members (it takes minutes).
    #[arg(long, default_value_t = 1024)]
    torchelastic_max: usize,
    /// With --native: also form against three dt-rdzv sharing jobs through etcd: `etcd`
    /// starts a three-member etcd on loopback ports; `etcd://h:p,...` uses that cluster.
    #[arg(long, requires = "native")]
    backend: Option<String>,
    /// With --backend: give members the group's servers in three rotated orders (two thirds
    /// reach a server that does not own the job and are redirected), instead of one order for
    /// all (what one `DTCOMM_RDZV_ENDPOINT` for every member gives).
    #[arg(long, requires = "backend")]
    rotate: bool,
    /// With --backend: members connect without naming their job, so each tries the servers
    /// in the order it was given (before clients ordered them by the job, every member of a
    /// job meeting on one server).
    #[arg(long, requires = "backend")]
    no_affinity: bool,
}

struct Sample {
    seconds: Vec<f64>,
    cpu: Vec<f64>,
    connect: Vec<f64>,
    rss: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    raise_fd_limit();
    let bin = match &args.server_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("dt-rdzv"),
    };
    let ours = start_dt_rdzv(&bin)?;
    if args.native {
        return native_main(&args, &bin, ours);
    }
    let torch = if args.no_torch {
        None
    } else {
        let py = args.python.clone().unwrap_or_else(default_python);
        match start_torch_store(&py) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("rdzv_perf: torch's TCPStore server did not start ({e}); use --no-torch");
                return Err(e.into());
            }
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.unwrap_or(1).max(1))
        .enable_all()
        .build()?;
    let timeout = Duration::from_secs(args.timeout_secs);
    if !args.json {
        println!(
            "# rdzv_perf: store barrier (connect + add + wait), median of {} rounds, same Rust client herd",
            args.rounds
        );
        println!(
            "# {:>7} {:>12} {:>12} {:>8} {:>12} {:>12} {:>14} {:>14}",
            "members",
            "dt-rdzv s",
            "torch s",
            "ratio",
            "dt-rdzv cpu",
            "torch cpu",
            "dt-rdzv RSS",
            "torch RSS"
        );
    }
    for &n in &args.members {
        let mut ours_s = Sample {
            seconds: vec![],
            cpu: vec![],
            connect: vec![],
            rss: 0,
        };
        let mut torch_s = Sample {
            seconds: vec![],
            cpu: vec![],
            connect: vec![],
            rss: 0,
        };
        for round in 0..args.rounds {
            // alternate which server goes first, so neither always gets the warmer machine
            let order: Vec<(&ServerProcess, &mut Sample)> = match (&torch, round % 2) {
                (Some(t), 0) => vec![(&ours, &mut ours_s), (t, &mut torch_s)],
                (Some(t), _) => vec![(t, &mut torch_s), (&ours, &mut ours_s)],
                (None, _) => vec![(&ours, &mut ours_s)],
            };
            for (server, sample) in order {
                let tag = format!("n{n}-r{round}");
                let mut rss = 0;
                let cpu0 = server.cpu_seconds();
                let r = rt.block_on(run_herd(&server.endpoint, n, &tag, timeout, || {
                    rss = server.rss().0;
                }))?;
                assert_eq!(
                    r.released, n,
                    "{}: not every member was released",
                    server.name
                );
                sample.seconds.push(r.total.as_secs_f64());
                sample.cpu.push(server.cpu_seconds() - cpu0);
                sample.connect.push(r.connect_all.as_secs_f64());
                sample.rss = sample.rss.max(rss);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let s = median(&ours_s.seconds).unwrap_or(f64::NAN);
        let t = median(&torch_s.seconds);
        if args.json {
            let obj = serde_json::json!({
                "members": n,
                "seconds": s,
                "torch_seconds": t,
                "ratio_torch_over_ours": t.map(|t| t / s),
                "server_rss_bytes": ours_s.rss,
                "torch_server_rss_bytes": torch.as_ref().map(|_| torch_s.rss),
                "server_cpu_seconds": median(&ours_s.cpu),
                "torch_server_cpu_seconds": median(&torch_s.cpu),
                "connect_seconds": median(&ours_s.connect),
                "torch_connect_seconds": median(&torch_s.connect),
                "rounds": args.rounds,
                "seconds_all": ours_s.seconds,
                "torch_seconds_all": torch_s.seconds,
            });
            println!("{obj}");
        } else {
            println!(
                "  {:>7} {:>12.4} {:>12} {:>8} {:>12.3} {:>12} {:>11.1} MiB {:>10}",
                n,
                s,
                t.map_or("-".into(), |t| format!("{t:.4}")),
                t.map_or("-".into(), |t| format!("{:.2}x", t / s)),
                median(&ours_s.cpu).unwrap_or(f64::NAN),
                torch.as_ref().map_or("-".into(), |_| format!(
                    "{:.3}",
                    median(&torch_s.cpu).unwrap_or(f64::NAN)
                )),
                ours_s.rss as f64 / (1 << 20) as f64,
                torch.as_ref().map_or("-".into(), |_| format!(
                    "{:.1} MiB",
                    torch_s.rss as f64 / (1 << 20) as f64
                )),
            );
        }
    }
    ours.stop();
    if let Some(t) = torch {
        t.stop();
    }
    Ok(())
}

fn native_main(
    args: &Args,
    bin: &std::path::Path,
    ours: ServerProcess,
) -> Result<(), Box<dyn std::error::Error>> {
    let (endpoint, fp) = ours
        .native
        .clone()
        .ok_or("dt-rdzv printed no native port")?;
    let cfg = client_config(&endpoint, &fp, BENCH_TOKEN);
    // The group sharing an etcd, when asked for: the cluster (ours or given), three servers
    // with one certificate, and the three rotations of their endpoint list.
    let etcd = match args.backend.as_deref() {
        Some("etcd") => Some(EtcdCluster::start(3)?),
        _ => None,
    };
    let group = match args.backend.as_deref() {
        None => None,
        Some(b) => {
            let url = etcd
                .as_ref()
                .map_or_else(|| b.to_string(), EtcdCluster::url);
            let dir = std::env::temp_dir().join(format!("rdzv-perf-group-{}", std::process::id()));
            let servers = start_group(bin, &url, &dir, 3)?;
            let eps: Vec<String> = servers
                .iter()
                .map(|s| s.native.clone().expect("native").0)
                .collect();
            let gfp = servers[0].native.clone().expect("native").1;
            let orders = if args.rotate { eps.len() } else { 1 };
            let cfgs: Vec<_> = (0..orders)
                .map(|r| {
                    let list: Vec<&str> = (0..eps.len())
                        .map(|k| eps[(r + k) % eps.len()].as_str())
                        .collect();
                    client_config(&list.join(","), &gfp, BENCH_TOKEN)
                })
                .collect();
            Some((servers, cfgs, url))
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.unwrap_or(2).max(1))
        .enable_all()
        .build()?;
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.kill_one || args.freeze_one {
        let (fault, name, sig) = if args.freeze_one {
            (Fault::Freeze, "freeze-one", "SIGSTOP")
        } else {
            (Fault::Kill, "kill-one", "SIGKILL")
        };
        for &n in &args.members {
            let mut s = Vec::new();
            for round in 0..args.rounds {
                let job = format!("{name}-n{n}-r{round}");
                let d = rt.block_on(run_kill_one(
                    &cfg,
                    bin,
                    &fp,
                    BENCH_TOKEN,
                    n.max(2),
                    &job,
                    timeout,
                    fault,
                ))?;
                s.push(d.as_secs_f64());
            }
            let m = median(&s).unwrap_or(f64::NAN);
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "fault": sig, "members": n, "recovery_seconds": m, "recovery_seconds_all": s,
                        "rounds": args.rounds, "heartbeat_timeout_seconds": 2.0,
                        "torchelastic_recovery_seconds_reference": 46.2,
                    })
                );
            } else {
                println!(
                    "# {name}: {n} members, {sig} one member process, default settings (heartbeat timeout 2 s; rendezvous clients only, no data plane to report the loss)"
                );
                println!(
                    "  recovery ({sig} -> every survivor holds its new rank): median {m:.3} s of {s:?}"
                );
            }
        }
        ours.stop();
        return Ok(());
    }
    let torch = if args.no_torch {
        None
    } else {
        Some(start_torch_store(
            &args.python.clone().unwrap_or_else(default_python),
        )?)
    };
    if !args.json {
        println!(
            "# rdzv_perf --native: join -> every member holds rank and peers (QUIC), beside the torchelastic compare-set barrier on torch's TCPStore; median of {} rounds",
            args.rounds
        );
        if let Some((_, _, url)) = &group {
            println!(
                "# group: three dt-rdzv sharing jobs through {url}; {}",
                match (args.rotate, args.no_affinity) {
                    (true, true) =>
                        "members get the servers in three rotated orders and try them so (2/3 redirected)",
                    (true, false) =>
                        "members get the servers in three rotated orders and order them by the job (affinity)",
                    (false, _) => "every member gets the servers in one order",
                }
            );
        }
        println!(
            "# {:>7} {:>24} {:>12} {:>12} {:>14} {:>8} {:>12} {:>24} {:>12}",
            "members",
            "native s",
            "connect s",
            "join s",
            "torchelastic s",
            "ratio",
            "CAS retries",
            "etcd group s",
            "group/single"
        );
    }
    for &n in &args.members {
        let (mut ours_s, mut conn_s, mut join_s, mut te_s, mut retries) =
            (vec![], vec![], vec![], vec![], vec![]);
        let (mut server_cpu, mut herd_cpu) = (vec![], vec![]);
        let mut quic = Vec::new();
        let mut group_s = Vec::new();
        for round in 0..args.rounds {
            let (cpu0, herd0) = (ours.cpu_seconds(), own_cpu_seconds());
            let job = format!("native-n{n}-r{round}");
            let r = if args.ranks_per_node > 0 {
                let k = args.ranks_per_node;
                rt.block_on(run_node_herd(&cfg, n, k, &job, timeout, args.in_flight))?
            } else {
                rt.block_on(run_native_herd(
                    std::slice::from_ref(&cfg),
                    n,
                    &job,
                    timeout,
                    args.in_flight,
                    args.preconnect,
                ))?
            };
            server_cpu.push(ours.cpu_seconds() - cpu0);
            herd_cpu.push(own_cpu_seconds() - herd0);
            ours_s.push(r.total.as_secs_f64());
            conn_s.push(r.connect_all.as_secs_f64());
            join_s.push(r.join_to_welcome.as_secs_f64());
            quic.push(r.quic);
            std::thread::sleep(Duration::from_millis(200));
            if let Some((_, cfgs, _)) = &group {
                let job = format!("group-n{n}-r{round}");
                // As dtrun's and dtcomm's members do: the job named before connecting.
                let cfgs: Vec<_> = cfgs
                    .iter()
                    .map(|c| ClientConfig {
                        affinity: (!args.no_affinity).then(|| job.clone()),
                        ..c.clone()
                    })
                    .collect();
                let g = rt.block_on(run_native_herd(
                    &cfgs,
                    n,
                    &job,
                    timeout,
                    args.in_flight,
                    args.preconnect,
                ))?;
                group_s.push(g.total.as_secs_f64());
                std::thread::sleep(Duration::from_millis(200));
            }
            if let Some(t) = torch.as_ref().filter(|_| n <= args.torchelastic_max) {
                let c = rt.block_on(run_cas_herd(
                    &t.endpoint,
                    n,
                    &format!("te-n{n}-r{round}"),
                    timeout,
                ))?;
                te_s.push(c.total.as_secs_f64());
                retries.push(c.retries as f64);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let s = median(&ours_s).unwrap_or(f64::NAN);
        let t = median(&te_s);
        let g = median(&group_s);
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "members": n, "seconds": s, "torchelastic_seconds": t,
                    "ratio_torchelastic_over_native": t.map(|t| t / s),
                    "connect_seconds": median(&conn_s), "join_to_welcome_seconds": median(&join_s),
                    "torchelastic_cas_retries": median(&retries),
                    "torchelastic_skipped": torch.is_some() && n > args.torchelastic_max,
                    "rounds": args.rounds, "seconds_all": ours_s, "torchelastic_seconds_all": te_s,
                    "server_rss_bytes": ours.rss().1,
                    "server_cpu_seconds": median(&server_cpu),
                    "herd_cpu_seconds": median(&herd_cpu),
                    "herd_quic": quic,
                    "client_threads": args.client_threads.unwrap_or(2),
                    "preconnect": args.preconnect,
                    "ranks_per_node": args.ranks_per_node,
                    "group_seconds": g, "group_seconds_all": group_s, "group_rotated": args.rotate, "group_affinity": !args.no_affinity,
                    "ratio_group_over_single": g.map(|g| g / s),
                    "etcd_rss_bytes": etcd.as_ref().map(EtcdCluster::rss),
                    "group_rss_bytes": group.as_ref().map(|(servers, _, _)| servers.iter().map(|x| x.rss().0).sum::<u64>()),
                })
            );
        } else {
            println!(
                "  {:>7} {:>24} {:>12.4} {:>12.4} {:>14} {:>8} {:>12} {:>24} {:>12}",
                n,
                median_range(&ours_s, 4),
                median(&conn_s).unwrap_or(f64::NAN),
                median(&join_s).unwrap_or(f64::NAN),
                t.map_or("-".into(), |t| format!("{t:.4}")),
                t.map_or("-".into(), |t| format!("{:.1}x", t / s)),
                median(&retries).map_or("-".into(), |r| format!("{r:.0}")),
                median_range(&group_s, 4),
                g.map_or("-".into(), |g| format!("{:.2}x", g / s))
            );
        }
    }
    ours.stop();
    if let Some(t) = torch {
        t.stop();
    }
    Ok(())
}

fn default_python() -> String {
    if let Ok(v) = std::env::var("DTCOMM_VENV") {
        return format!("{v}/bin/python");
    }
    for p in [".venv/bin/python", "../.venv/bin/python"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    "python3".into()
}

/// CPU time (user + system) this process (the client herd) has used so far, in seconds.
fn own_cpu_seconds() -> f64 {
    dt_bench::rdzv::cpu_seconds(std::process::id())
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into `lim`, a live local, and `setrlimit` reads it
    // back; neither keeps the pointer, and raising the soft limit to the hard one is always
    // allowed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
