//! The TCPStore commands: `dt-rdzv keys` lists a running server's keys, `dt-rdzv purge`
//! deletes a job's (or a namespace's, or every) key.

use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::server::parse_duration;
use dt_rdzv_proto::tcpstore::namespace_of;

// Where the server's TCPStore port is.
#[derive(clap::Args)]
pub(crate) struct ClientArgs {
    /// The server's store endpoint, host[:port].
    #[arg(long, env = "DTRDZV_ENDPOINT", default_value = "127.0.0.1:29400")]
    endpoint: String,
    /// How long to try to reach the server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

// What `purge` deletes.
#[derive(clap::Args)]
pub(crate) struct PurgeArgs {
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

fn connect(args: &ClientArgs) -> Result<TcpStoreClient, String> {
    TcpStoreClient::connect(&args.endpoint, args.timeout).map_err(|e| e.to_string())
}

/// Prints every key, sorted.
pub(crate) fn keys(args: ClientArgs) -> Result<(), String> {
    let client = connect(&args)?;
    let mut keys = client.list_raw_keys().map_err(|e| e.to_string())?;
    keys.sort();
    for k in keys {
        println!("{}", String::from_utf8_lossy(&k));
    }
    Ok(())
}

/// Deletes the keys `args` name.
pub(crate) fn purge(args: PurgeArgs) -> Result<(), String> {
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
