//! The native port's operator commands: `dt-rdzv status`, `jobs` and `stop` ask a running
//! server (with the server's or a job's token), `dt-rdzv token` derives a job's token.

use std::path::PathBuf;
use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::native::{BlockingNativeClient, ClientConfig, Trust};
use dt_rdzv::server::{hang_json, job_json, parse_duration};
use dt_rdzv::store::Store;
use dt_rdzv_proto::native::JobStatus;
use dt_rdzv_proto::native::hang::{HangOptions, HangReport, diagnose, store};
use dt_rdzv_proto::native::progress::from_record;

// What `token` derives from.
#[derive(clap::Args)]
pub(crate) struct TokenArgs {
    /// The job (run id).
    #[arg(long)]
    job: String,
    /// The server's token.
    #[arg(long, env = "DTRDZV_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the server's token from this file.
    #[arg(long, env = "DTRDZV_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

// How to reach and trust the server's native port, and with which token.
#[derive(clap::Args)]
pub(crate) struct NativeArgs {
    /// The server's native endpoint, host[:port].
    #[arg(
        long,
        env = "DTRDZV_NATIVE_ENDPOINT",
        default_value_t = format!("127.0.0.1:{}", dt_rdzv_proto::ports::NATIVE)
    )]
    native: String,
    /// The join token.
    #[arg(long, env = "DTRDZV_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the token from this file.
    #[arg(long, env = "DTRDZV_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The server certificate's fingerprint (printed by `dt-rdzv serve`).
    #[arg(long, env = "DTRDZV_FINGERPRINT")]
    fingerprint: Option<String>,
    /// Verify the server certificate against this CA file instead.
    #[arg(long, env = "DTRDZV_CACERT", conflicts_with = "fingerprint")]
    cacert: Option<PathBuf>,
    /// Server name to verify with --cacert.
    #[arg(long, default_value = "localhost")]
    server_name: String,
    /// Deadline for connecting and for each answer.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

// What `status` shows.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// The job (all jobs if left out).
    job: Option<String>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Why the job is stuck: every rank's pending and last completed call, who waits for
    /// whom, and the culprits in words (needs the job, or --store).
    #[arg(long)]
    hang: bool,
    /// With --hang: read the summaries that the ranks of a store job (torchrun, env://)
    /// publish in this TCPStore (host:port) instead of asking the native port.
    #[arg(long, requires = "hang")]
    store: Option<String>,
    /// With --store: the world size (read from the store if left out).
    #[arg(long, requires = "store")]
    world: Option<u32>,
    /// With --hang: calls pending for less than this are not counted as stuck.
    #[arg(long, default_value = "1s", value_parser = parse_duration, requires = "hang")]
    after: Duration,
}

// How `jobs` prints.
#[derive(clap::Args)]
pub(crate) struct JobsArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

// What `stop` stops.
#[derive(clap::Args)]
pub(crate) struct StopArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// The job.
    job: String,
    /// Told to every member.
    #[arg(long, default_value = "stopped by dt-rdzv stop")]
    reason: String,
}

fn read_token(token: &Option<String>, file: &Option<PathBuf>) -> Result<String, String> {
    Ok(match (token, file) {
        (Some(t), _) => t.clone(),
        (None, Some(p)) => std::fs::read_to_string(p)
            .map_err(|e| format!("token file {}: {e}", p.display()))?
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        (None, None) => String::new(),
    })
}

/// Prints the job's token.
pub(crate) fn job_token(args: TokenArgs) -> Result<(), String> {
    let server = read_token(&args.token, &args.token_file)?;
    if server.is_empty() {
        return Err("say the server's token: DTRDZV_TOKEN or --token-file".into());
    }
    println!(
        "{}",
        dt_rdzv_proto::rendezvous::job_token(&server, &args.job)
    );
    Ok(())
}

/// A client of the native port, as `a` says.
pub(crate) fn native_client(a: &NativeArgs) -> Result<BlockingNativeClient, String> {
    let token = read_token(&a.token, &a.token_file)?;
    let trust = match (&a.fingerprint, &a.cacert) {
        (Some(f), _) => Trust::Fingerprint(f.clone()),
        (None, Some(c)) => Trust::CaFile(c.clone()),
        (None, None) => {
            return Err(
                "say how to trust the server: --fingerprint (printed by dt-rdzv serve) or --cacert"
                    .into(),
            );
        }
    };
    let mut cfg = ClientConfig::new(a.native.clone(), token, trust);
    cfg.server_name = a.server_name.clone();
    cfg.timeout = a.timeout;
    BlockingNativeClient::connect(&cfg).map_err(|e| e.to_string())
}

fn print_job(j: &JobStatus) {
    let s = &j.spec;
    println!(
        "job {}: {}, round {}, world {} (min {}, max {}), restarts {}, age {:.1} s",
        j.job,
        j.state,
        j.round,
        j.world,
        s.min_members,
        s.max_members,
        j.restarts,
        j.age_ms as f64 / 1000.0
    );
    if !j.missing.is_empty() {
        println!("  missing: {}", j.missing.join(", "));
    }
    if !j.config_keys.is_empty() {
        println!("  config: {}", j.config_keys.join(", "));
    }
    println!(
        "  {:>6}  {:<24} {:<20} {:<8} {:>10}  addrs",
        "rank", "member", "node", "state", "heartbeat"
    );
    for m in &j.members {
        println!(
            "  {:>6}  {:<24} {:<20} {:<8} {:>8.1}s  {} (seen from {})",
            m.rank.map_or("-".into(), |r| r.to_string()),
            m.member,
            m.node,
            m.state,
            m.last_seen_ms as f64 / 1000.0,
            m.addrs.join(","),
            m.observed_ip
        );
    }
}

fn print_hang(report: &HangReport, json: bool) -> Result<(), String> {
    if json {
        let v = hang_json(report);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{report}");
    }
    Ok(())
}

/// The ranks' summaries in a store (`dtcomm/progress/<rank>`) as a job.
fn store_job(endpoint: &str, world: Option<u32>, timeout: Duration) -> Result<JobStatus, String> {
    let client =
        TcpStoreClient::connect(endpoint, timeout).map_err(|e| format!("{endpoint}: {e}"))?;
    let world = match world {
        Some(w) => w,
        None => {
            if !client
                .check(&[store::WORLD_KEY])
                .map_err(|e| e.to_string())?
            {
                return Err(format!(
                    "{endpoint} holds no {}: no dtcomm rank publishes its calls there (say --world)",
                    store::WORLD_KEY
                ));
            }
            let v = client
                .get(store::WORLD_KEY, timeout)
                .map_err(|e| e.to_string())?;
            String::from_utf8_lossy(&v)
                .trim()
                .parse()
                .map_err(|_| format!("{}: not a world size", store::WORLD_KEY))?
        }
    };
    if world == 0 || world > 1 << 20 {
        return Err(format!("world size {world}: 1 to {}", 1 << 20));
    }
    let mut records = Vec::with_capacity(world as usize);
    for rank in 0..world {
        let k = store::key(rank);
        let r = if client.check(&[k.as_str()]).map_err(|e| e.to_string())? {
            let v = client.get(&k, timeout).map_err(|e| e.to_string())?;
            match from_record(&v) {
                Ok(r) => Some(r),
                Err(e) => {
                    eprintln!("rank {rank}: {e}");
                    None
                }
            }
        } else {
            None
        };
        records.push(r);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok(store::store_job(
        &format!("store {endpoint}"),
        &records,
        now,
    ))
}

/// Prints one job's status, or every job's.
pub(crate) fn status(args: StatusArgs) -> Result<(), String> {
    if let Some(store) = &args.store {
        let job = store_job(store, args.world, args.native.timeout)?;
        let opts = HangOptions {
            stuck_after_ms: args.after.as_millis() as u64,
            // Store publishers write once a second.
            silent_after_ms: 3_000,
            ..HangOptions::default()
        };
        return print_hang(&diagnose(&job, &opts), args.json);
    }
    if args.hang && args.job.is_none() {
        return Err("--hang needs the job (or --store HOST:PORT for a store job)".into());
    }
    let mut c = native_client(&args.native)?;
    let jobs = c.status(args.job.as_deref()).map_err(|e| e.to_string())?;
    if args.hang {
        let Some(j) = jobs.first() else {
            return Err(format!("no job {:?}", args.job.unwrap_or_default()));
        };
        let opts = HangOptions {
            stuck_after_ms: args.after.as_millis() as u64,
            ..HangOptions::default()
        };
        let report = diagnose(j, &opts);
        if args.json {
            let v = hang_json(&report);
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            print!("{report}");
        }
        return Ok(());
    }
    if args.json {
        let v: Vec<_> = jobs.iter().map(job_json).collect();
        let out = match args.job {
            Some(_) => serde_json::to_string_pretty(&v[0]),
            None => serde_json::to_string_pretty(&serde_json::json!({ "jobs": v })),
        };
        println!("{}", out.map_err(|e| e.to_string())?);
    } else if jobs.is_empty() {
        println!("no jobs");
    } else {
        for j in &jobs {
            print_job(j);
        }
    }
    Ok(())
}

/// Lists the jobs.
pub(crate) fn jobs(args: JobsArgs) -> Result<(), String> {
    let mut c = native_client(&args.native)?;
    let jobs = c.status(None).map_err(|e| e.to_string())?;
    if args.json {
        let v: Vec<_> = jobs.iter().map(job_json).collect();
        println!("{}", serde_json::json!({ "jobs": v }));
        return Ok(());
    }
    println!(
        "{:<32} {:<12} {:>6} {:>6} {:>8} {:>9}",
        "job", "state", "round", "world", "members", "restarts"
    );
    for j in jobs {
        println!(
            "{:<32} {:<12} {:>6} {:>6} {:>8} {:>9}",
            j.job,
            j.state,
            j.round,
            j.world,
            j.members.len(),
            j.restarts
        );
    }
    Ok(())
}

/// Stops a job.
pub(crate) fn stop(args: StopArgs) -> Result<(), String> {
    let mut c = native_client(&args.native)?;
    c.stop(&args.job, &args.reason).map_err(|e| e.to_string())?;
    println!("stopped job {}", args.job);
    Ok(())
}
