//! Multi-process tests: the test binary re-executes itself as child ranks. The parent starts an
//! in-process `dt-rdzv` server; children find each other through it with the blocking
//! TCPStore client, exactly as separate jobs would.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::store::Store;

pub const CHILD_ENV: &str = "DTCOMM_TEST_CHILD";

/// What a child was asked to do: (role, rank, world, store endpoint).
pub fn child_args() -> Option<(String, usize, usize, String)> {
    let role = std::env::var(CHILD_ENV).ok()?;
    let get = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"));
    Some((
        role,
        get("DTCOMM_TEST_RANK").parse().unwrap(),
        get("DTCOMM_TEST_WORLD").parse().unwrap(),
        get("DTCOMM_TEST_STORE"),
    ))
}

/// The child's store client.
pub fn child_store(endpoint: &str) -> Arc<dyn Store> {
    Arc::new(TcpStoreClient::connect(endpoint, Duration::from_secs(30)).expect("store connect"))
}

/// Spawns `world` children of this test binary running the ignored test `entry` in role
/// `role`.
pub fn spawn_ranks(
    entry: &str,
    role: &str,
    world: usize,
    endpoint: &str,
    extra_env: &[(&str, &str)],
) -> Vec<Child> {
    let exe = std::env::current_exe().unwrap();
    (0..world)
        .map(|r| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--ignored",
                "--exact",
                entry,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, role)
            .env("DTCOMM_TEST_RANK", r.to_string())
            .env("DTCOMM_TEST_WORLD", world.to_string())
            .env("DTCOMM_TEST_STORE", endpoint)
            .env("DTCOMM_SOCKET_IFNAME", "lo")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            for (k, v) in extra_env {
                cmd.env(k, v);
            }
            cmd.spawn().unwrap()
        })
        .collect()
}

/// Waits for a child with a deadline, killing it (by its own handle) if it overruns.
pub fn wait_output(mut child: Child, limit: Duration) -> (Option<i32>, String, String) {
    use std::io::Read;
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            let mut err = String::new();
            if let Some(mut o) = child.stdout.take() {
                o.read_to_string(&mut out).unwrap();
            }
            if let Some(mut e) = child.stderr.take() {
                e.read_to_string(&mut err).unwrap();
            }
            return (status.code(), out, err);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The child side of the kill tests: allreduces `count` floats until a peer is lost, prints
/// `ERROR lost=<rank> after <n> calls: <error>` and whether a later call fails at once
/// (`AGAIN true`), and exits 0; the victim (`DTCOMM_TEST_VICTIM`) prints `READY` after three
/// calls. Exits 3 if nothing failed within 60 s. A peer its own links lost is printed as
/// `REPORTED peer=<rank>` (the round fence's reporter).
pub fn allreduce_until_lost(c: &dtcomm::Communicator, rank: usize, count: usize) -> ! {
    use dtcomm::{CommError, ReduceOp};
    let victim: usize = std::env::var("DTCOMM_TEST_VICTIM")
        .unwrap()
        .parse()
        .unwrap();
    // What the links saw goes to the membership service in a real job: print it here.
    c.fence().set_reporter(Box::new(|peer, detail| {
        println!("REPORTED peer={peer}: {detail}");
    }));
    let mut v = vec![1f32; count];
    let start = std::time::Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(60) {
        if let Err(e) = c.all_reduce(&mut v, ReduceOp::Sum) {
            let lost = match &e {
                CommError::PeerLost { peer, .. } => Some(*peer),
                CommError::Aborted { lost, .. } => *lost,
                _ => None,
            };
            println!("ERROR lost={lost:?} after {i} calls: {e}");
            // Every later call fails at once with the same error.
            let again = c.barrier().unwrap_err();
            println!("AGAIN {}", matches!(again, CommError::Failed(_)));
            std::process::exit(0);
        }
        i += 1;
        if rank == victim && i == 3 {
            println!("READY");
        }
        v.fill(1.0);
    }
    println!("NO ERROR");
    std::process::exit(3);
}
