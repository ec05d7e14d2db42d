//! `dt-rdzv`: the dtcomm rendezvous server and its operator commands.
//!
//! * `serve`: the server;
//! * `store`: the TCPStore commands (`keys`, `purge`);
//! * `operator`: the native port's operator commands (`status`, `jobs`, `stop`, `token`);
//! * `member`: a member that prints its rounds (`member`).
//!
//! The argument structs carry plain comments, not doc comments: clap would print a doc comment
//! as the command's help.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dt_rdzv::server::ServeConfig;

use self::member::MemberArgs;
use self::operator::{JobsArgs, StatusArgs, StopArgs, TokenArgs};
use self::store::{ClientArgs, PurgeArgs};

mod member;
mod operator;
mod serve;
mod store;

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Serve(config) => serve::serve(*config),
        Command::Purge(args) => report(store::purge(args)),
        Command::Keys(args) => report(store::keys(args)),
        Command::Status(args) => report(operator::status(args)),
        Command::Jobs(args) => report(operator::jobs(args)),
        Command::Stop(args) => report(operator::stop(args)),
        Command::Member(args) => member::member(args),
        Command::Token(args) => report(operator::job_token(args)),
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
