//! `rdzv_perf`: N members meet at a store barrier (connect, `add`, `wait` on a release key),
//! against `dt-rdzv serve` and against torch's own TCPStore server, in the same run, with the
//! same Rust client herd. Prints, per N, the time to release everyone for both servers (median
//! of `--rounds`), the ratio, and each server's resident memory with N members connected.
//!
//! ```text
//! rdzv_perf --members 64,256,1024,4096            # table
//! rdzv_perf --members 64,256,1024,4096 --json     # one JSON object per N
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use dt_bench::rdzv::{ServerProcess, run_herd, start_dt_rdzv, start_torch_store};
use dt_bench::stats::median;

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
    /// Client runtime threads (the client herd shares the machine with the server).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Give up on a round after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
}

struct Sample {
    seconds: Vec<f64>,
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
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()?;
    let timeout = Duration::from_secs(args.timeout_secs);
    if !args.json {
        println!(
            "# rdzv_perf: store barrier (connect + add + wait), median of {} rounds, same Rust client herd",
            args.rounds
        );
        println!(
            "# {:>7} {:>12} {:>12} {:>8} {:>14} {:>14}",
            "members", "dt-rdzv s", "torch s", "ratio", "dt-rdzv RSS", "torch RSS"
        );
    }
    for &n in &args.members {
        let mut ours_s = Sample {
            seconds: vec![],
            connect: vec![],
            rss: 0,
        };
        let mut torch_s = Sample {
            seconds: vec![],
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
                let r = rt.block_on(run_herd(&server.endpoint, n, &tag, timeout, || {
                    rss = server.rss().0;
                }))?;
                assert_eq!(
                    r.released, n,
                    "{}: not every member was released",
                    server.name
                );
                sample.seconds.push(r.total.as_secs_f64());
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
                "connect_seconds": median(&ours_s.connect),
                "torch_connect_seconds": median(&torch_s.connect),
                "rounds": args.rounds,
                "seconds_all": ours_s.seconds,
                "torch_seconds_all": torch_s.seconds,
            });
            println!("{obj}");
        } else {
            println!(
                "  {:>7} {:>12.4} {:>12} {:>8} {:>11.1} MiB {:>10}",
                n,
                s,
                t.map_or("-".into(), |t| format!("{t:.4}")),
                t.map_or("-".into(), |t| format!("{:.2}x", t / s)),
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

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
