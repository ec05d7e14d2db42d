//! `dt-rdzv`: the dtcomm rendezvous server and its operator commands.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::server::{ServeConfig, Server, parse_duration};
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
    /// Run the server (TCPStore-compatible store on --port, 29400 by default).
    Serve(ServeConfig),
    /// Delete a job's keys from a running server.
    Purge(PurgeArgs),
    /// List the keys a running server holds.
    Keys(ClientArgs),
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
        Command::Serve(config) => serve(config),
        Command::Purge(args) => report(purge(args)),
        Command::Keys(args) => report(keys(args)),
    }
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
    raise_fd_limit();
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
        let addr = match server.local_addr() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("dt-rdzv: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(
            tcpstore = %addr,
            namespace_ttl = ?config.namespace_ttl.0,
            handshake_timeout = ?config.handshake_timeout,
            frame_timeout = ?config.frame_timeout,
            "dt-rdzv serve listening"
        );
        // One machine-readable line on stdout, for scripts that start us on port 0.
        println!("dt-rdzv listening tcpstore={addr}");
        server.run(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stop with SIGINT");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

/// Thousands of members means thousands of sockets: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                tracing::warn!(soft = lim.rlim_cur, "could not raise the open-file limit");
            }
        }
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
