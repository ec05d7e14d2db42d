//! `dt-rdzv member`: joins a job as a member and prints each round as a JSON line until the
//! job ends (for scripts, tests and benchmarks).

use std::process::ExitCode;
use std::time::Duration;

use dt_rdzv::native::Membership;
use dt_rdzv::server::parse_duration;
use dt_rdzv_proto::native::{JobSpec, LateJoin, Role, ServerMsg};

use super::operator::{NativeArgs, native_client};

// Who joins which job, and how.
#[derive(clap::Args)]
pub(crate) struct MemberArgs {
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

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Joins and prints rounds until the job ends (exit 0 when it finished, 3 otherwise).
pub(crate) fn member(args: MemberArgs) -> ExitCode {
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
