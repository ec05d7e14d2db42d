//! `dt-rdzv`: the dtcomm rendezvous server and its operator commands.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::native::{BlockingNativeClient, ClientConfig, Membership, Trust};
use dt_rdzv::server::{ServeConfig, Server, job_json, parse_duration};
use dt_rdzv_proto::native::{JobSpec, JobStatus, LateJoin, Role, ServerMsg};
use dt_rdzv_proto::tcpstore::namespace_of;

#[derive(Parser)]
#[command(
    name = "dt-rdzv",
    version,
    about = "dtcomm rendezvous server (c10d TCPStore compatible)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: TCPStore port 29400, native QUIC port 29401, HTTP port 29402.
    Serve(Box<ServeConfig>),
    /// Delete a job's keys from a running server.
    Purge(PurgeArgs),
    /// List the keys a running server holds.
    Keys(ClientArgs),
    /// Show one job (members, ranks, round, last heartbeat, who is missing) or every job.
    Status(StatusArgs),
    /// List the jobs a running server holds.
    Jobs(JobsArgs),
    /// Stop a job: every member is told, and later joins are refused.
    Stop(StopArgs),
    /// Join a job as a member and print each round as a JSON line until the job ends
    /// (for scripts, tests and benchmarks).
    Member(MemberArgs),
    /// Print a job's own token, derived from the server's: it lets that job's members join
    /// it, read its status and stop it, and opens nothing else.
    Token(TokenArgs),
}

#[derive(clap::Args)]
struct TokenArgs {
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

#[derive(clap::Args)]
struct NativeArgs {
    /// The server's native endpoint, host[:port].
    #[arg(
        long,
        env = "DTRDZV_NATIVE_ENDPOINT",
        default_value = "127.0.0.1:29401"
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

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// The job (all jobs if left out).
    job: Option<String>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct JobsArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct StopArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// The job.
    job: String,
    /// Told to every member.
    #[arg(long, default_value = "stopped by dt-rdzv stop")]
    reason: String,
}

#[derive(clap::Args)]
struct MemberArgs {
    #[command(flatten)]
    native: NativeArgs,
    /// The job (run id).
    #[arg(long)]
    job: String,
    /// Member id (default: node:pid).
    #[arg(long)]
    member: Option<String>,
    /// Node name (default: the host name).
    #[arg(long)]
    node: Option<String>,
    /// Address to advertise to peers (repeatable).
    #[arg(long)]
    addr: Vec<String>,
    /// Join as the main member.
    #[arg(long)]
    main: bool,
    /// Fewest members of a round.
    #[arg(long, default_value_t = 1)]
    min: u32,
    /// Most members of a round.
    #[arg(long)]
    max: u32,
    /// Last call once min are present.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    last_call: Duration,
    /// Join timeout of a round.
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    join_timeout: Duration,
    /// Ephemeral job (ends when the main member leaves).
    #[arg(long)]
    ephemeral: bool,
}

#[derive(clap::Args)]
struct ClientArgs {
    /// The server's store endpoint, host[:port].
    #[arg(long, env = "DTRDZV_ENDPOINT", default_value = "127.0.0.1:29400")]
    endpoint: String,
    /// How long to try to reach the server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(clap::Args)]
struct PurgeArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Purge torchrun's rendezvous state for this --rdzv-id (namespace torch.rendezvous.ID).
    #[arg(long, conflicts_with_all = ["namespace", "all"])]
    rdzv_id: Option<String>,
    /// Purge every key of this namespace (the first path segment of the key, e.g. default_pg).
    #[arg(long, conflicts_with = "all")]
    namespace: Option<String>,
    /// Purge every key.
    #[arg(long)]
    all: bool,
    /// Only print what would be deleted.
    #[arg(long)]
    dry_run: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Serve(config) => serve(*config),
        Command::Purge(args) => report(purge(args)),
        Command::Keys(args) => report(keys(args)),
        Command::Status(args) => report(status(args)),
        Command::Jobs(args) => report(jobs(args)),
        Command::Stop(args) => report(stop(args)),
        Command::Member(args) => member(args),
        Command::Token(args) => report(job_token(args)),
    }
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

fn job_token(args: TokenArgs) -> Result<(), String> {
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

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DTRDZV_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn report(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dt-rdzv: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: ServeConfig) -> ExitCode {
    return_freed_values();
    dt_rdzv::server::raise_nofile_limit();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.worker_threads {
        rt.worker_threads(n);
    }
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dt-rdzv: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Watch the signals before any port opens: a SIGTERM that arrives once clients can
        // reach us must stop us cleanly, not find the default disposition still in place.
        let shutdown = shutdown_signal();
        let server = match Server::bind(config.clone()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "dt-rdzv: cannot listen on {}:{}: {e}",
                    config.host, config.port
                );
                return ExitCode::FAILURE;
            }
        };
        let server = match &config.backend {
            None => server,
            Some(b) => {
                let shared = match dt_rdzv::server::storage::open(b, config.backend_timeout).await {
                    Ok(storage) => server.share(storage).await,
                    Err(e) => Err(std::io::Error::other(e)),
                };
                match shared {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("dt-rdzv: --backend {b}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        };
        let addr = server.local_addr().ok();
        let native = server.native_addr();
        let http = server.http_addr();
        let fingerprint = server.fingerprint().unwrap_or("-").to_string();
        tracing::info!(
            tcpstore = ?addr,
            native = ?native,
            http = ?http,
            %fingerprint,
            namespace_ttl = ?config.namespace_ttl.0,
            heartbeat_timeout = ?config.heartbeat_timeout,
            "dt-rdzv serve listening"
        );
        // Machine-readable lines on stdout, for scripts that start us on port 0. The first
        // line stays the TCPStore address.
        let show = |a: Option<std::net::SocketAddr>| a.map_or("off".to_string(), |a| a.to_string());
        println!("dt-rdzv listening tcpstore={}", show(addr));
        println!(
            "dt-rdzv listening native={} fingerprint={fingerprint}",
            show(native)
        );
        println!("dt-rdzv listening http={}", show(http));
        if let Some(a) = server.etcd_v2_addr() {
            println!("dt-rdzv listening etcd_v2={a}");
            if server.token().0.is_some() {
                tracing::warn!(
                    "the etcd v2 port asks for the token (HTTP basic password or bearer); torch's etcd backends send none: use --no-auth on a trusted network for them"
                );
            }
        }
        match server.token() {
            (Some(t), true) => {
                tracing::warn!(
                    "no token given (DTRDZV_TOKEN, --token-file): generated one for this run"
                );
                println!("dt-rdzv token={t}");
            }
            (None, _) => tracing::warn!(
                "--no-auth: anyone who reaches the native port may join and read jobs"
            ),
            _ => {}
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        server.run(shutdown).await;
        ExitCode::SUCCESS
    })
}

/// Installs the SIGTERM and SIGINT handlers now and returns what resolves when either comes.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            },
            (term, int) => {
                let e = term
                    .err()
                    .or(int.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(error = %e, "cannot watch SIGTERM/SIGINT; stop with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Freed values return their memory: glibc raises its mmap threshold each time a large
/// block is freed, after which 8 MiB values come from the heap and a server's RSS keeps the
/// high-water mark of its churn. A fixed 1 MiB threshold keeps every value-sized buffer
/// mmapped, so the memory bounds in the README hold for RSS too. Only the `serve` process does
/// this (an embedded server leaves its host's allocator alone).
fn return_freed_values() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter (thread-safe, no memory passed).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

fn connect(args: &ClientArgs) -> Result<TcpStoreClient, String> {
    TcpStoreClient::connect(&args.endpoint, args.timeout).map_err(|e| e.to_string())
}

fn keys(args: ClientArgs) -> Result<(), String> {
    let client = connect(&args)?;
    let mut keys = client.list_raw_keys().map_err(|e| e.to_string())?;
    keys.sort();
    for k in keys {
        println!("{}", String::from_utf8_lossy(&k));
    }
    Ok(())
}

fn purge(args: PurgeArgs) -> Result<(), String> {
    let target: Option<Vec<u8>> = match (&args.rdzv_id, &args.namespace, args.all) {
        (Some(id), _, _) => Some(format!("torch.rendezvous.{id}").into_bytes()),
        (_, Some(ns), _) => Some(ns.clone().into_bytes()),
        (None, None, true) => None,
        (None, None, false) => {
            return Err("say what to purge: --rdzv-id ID, --namespace NS or --all".into());
        }
    };
    let client = connect(&args.client)?;
    let keys = client.list_raw_keys().map_err(|e| e.to_string())?;
    let doomed: Vec<Vec<u8>> = keys
        .into_iter()
        .filter(|k| target.as_deref().is_none_or(|ns| namespace_of(k) == ns))
        .collect();
    let mut deleted = 0;
    for k in &doomed {
        if args.dry_run {
            println!("would delete {}", String::from_utf8_lossy(k));
        } else if client.delete_raw_key(k).map_err(|e| e.to_string())? {
            deleted += 1;
        }
    }
    if !args.dry_run {
        println!("deleted {deleted} keys");
    }
    Ok(())
}

fn native_client(a: &NativeArgs) -> Result<BlockingNativeClient, String> {
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

fn status(args: StatusArgs) -> Result<(), String> {
    let mut c = native_client(&args.native)?;
    let jobs = c.status(args.job.as_deref()).map_err(|e| e.to_string())?;
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

fn jobs(args: JobsArgs) -> Result<(), String> {
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

fn stop(args: StopArgs) -> Result<(), String> {
    let mut c = native_client(&args.native)?;
    c.stop(&args.job, &args.reason).map_err(|e| e.to_string())?;
    println!("stopped job {}", args.job);
    Ok(())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn member(args: MemberArgs) -> ExitCode {
    let mut c = match native_client(&args.native) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dt-rdzv: {e}");
            return ExitCode::FAILURE;
        }
    };
    let node = args.node.clone().unwrap_or_else(host_name);
    let who = Membership {
        job: args.job.clone(),
        member: args
            .member
            .clone()
            .unwrap_or_else(|| format!("{node}:{}", std::process::id())),
        node,
        addrs: args.addr.clone(),
        host: Vec::new(),
        role: if args.main { Role::Main } else { Role::Worker },
        spec: JobSpec {
            min_members: args.min,
            max_members: args.max,
            last_call_ms: args.last_call.as_millis() as u64,
            join_timeout_ms: args.join_timeout.as_millis() as u64,
            ephemeral: args.ephemeral,
            late_join: LateJoin::Immediate,
            ..JobSpec::default()
        },
    };
    if let Err(e) = c.join(who) {
        eprintln!("dt-rdzv: {e}");
        return ExitCode::FAILURE;
    }
    loop {
        let line = match c.next_message(Duration::from_secs(3600)) {
            Ok(ServerMsg::Welcome(w)) => serde_json::json!({
                "event": "welcome", "job": w.job, "round": w.round, "rank": w.rank,
                "world": w.world, "local_rank": w.local_rank, "local_world": w.local_world,
                "node_rank": w.node_rank, "nodes": w.nodes, "cause": w.cause.to_string(),
                "peers": w.peers.iter().map(|p| serde_json::json!({
                    "rank": p.rank, "member": p.member, "addrs": p.addrs, "observed_ip": p.observed_ip,
                })).collect::<Vec<_>>(),
            }),
            Ok(ServerMsg::RoundEnded { round, cause, .. }) => serde_json::json!({
                "event": "round_ended", "round": round, "cause": cause.to_string(),
            }),
            Ok(ServerMsg::JobEnded { end, .. }) => {
                println!(
                    "{}",
                    serde_json::json!({ "event": "job_ended", "end": end.to_string(), "how": end.label() })
                );
                return if end.label() == "finished" {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(3)
                };
            }
            Ok(ServerMsg::Refused { message, .. }) => {
                eprintln!("dt-rdzv: refused: {message}");
                continue;
            }
            Ok(_) => continue,
            Err(dt_rdzv::native::NativeError::Timeout { .. }) => continue,
            Err(e) => {
                eprintln!("dt-rdzv: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("{line}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
}
