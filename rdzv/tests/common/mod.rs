//! What the native-protocol test binaries share.

/// The server token the native tests use.
#[allow(dead_code)]
pub const TOKEN: &str = "test-token";
/// How long a test waits for a round: generous, the machine is shared and slow.
#[allow(dead_code)]
pub const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A loopback server on ephemeral ports whose token is `token`.
#[allow(dead_code)] // not every test binary starts its own
pub fn server_with_token(token: &str) -> dt_rdzv::server::BackgroundServer {
    dt_rdzv::server::BackgroundServer::start(dt_rdzv::server::ServeConfig {
        token: Some(token.into()),
        ..dt_rdzv::server::ServeConfig::loopback_ephemeral()
    })
    .expect("server starts")
}

/// Client settings for `s`'s native port, trusting its certificate, with `token`.
#[allow(dead_code)]
pub fn client_cfg(
    s: &dt_rdzv::server::BackgroundServer,
    token: &str,
) -> dt_rdzv::native::ClientConfig {
    dt_rdzv::native::ClientConfig::new(
        s.native_endpoint().unwrap(),
        token,
        dt_rdzv::native::Trust::Fingerprint(s.fingerprint().unwrap().into()),
    )
}

/// A two-thread runtime for the clients of one test (each server runs its own).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `GET path` on the HTTP port at `addr` (with a bearer token, if given): the status code and
/// the body.
#[allow(dead_code)] // not every test binary reads the HTTP port
pub fn http_get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// `n` members of job `job` (one fixed round) on server `s`, joined with the server token,
/// whose heartbeats carry `summary(rank, round)` once each is welcomed; returned welcomed.
#[allow(dead_code)] // only the tests of members' summaries use it
pub async fn members_with_progress(
    s: &dt_rdzv::server::BackgroundServer,
    token: &str,
    job: &str,
    n: u32,
    summary: impl Fn(u32, u64) -> Option<dt_rdzv_proto::native::Progress>
    + Clone
    + Send
    + Sync
    + 'static,
) -> Vec<dt_rdzv::native::NativeClient> {
    members_reporting(s, token, job, n, None, summary).await.0
}

/// As [`members_with_progress`]; with `agent_node`, every member joins as a rank of that node
/// through one node agent (returned too, to keep it alive).
pub async fn members_reporting(
    s: &dt_rdzv::server::BackgroundServer,
    token: &str,
    job: &str,
    n: u32,
    agent_node: Option<&str>,
    summary: impl Fn(u32, u64) -> Option<dt_rdzv_proto::native::Progress>
    + Clone
    + Send
    + Sync
    + 'static,
) -> (
    Vec<dt_rdzv::native::NativeClient>,
    Option<dt_rdzv::native::NodeAgent>,
) {
    use std::sync::{Arc, Mutex};

    use dt_rdzv::native::{ClientConfig, Connector, Membership, ProgressSource, Trust};
    use dt_rdzv_proto::native::{JobSpec, Role};

    let wait = std::time::Duration::from_secs(60);
    let cfg = ClientConfig::new(
        s.native_endpoint().unwrap(),
        token,
        Trust::Fingerprint(s.fingerprint().unwrap().into()),
    );
    let connector = Connector::new(&cfg.trust).unwrap();
    let agent = match agent_node {
        Some(node) => Some(connector.node_agent(&cfg, job, node).await.expect("agent")),
        None => None,
    };
    let mut members = Vec::new();
    for i in 0..n {
        let place: Arc<Mutex<Option<(u32, u64)>>> = Arc::default();
        let (p, f) = (place.clone(), summary.clone());
        let progress = Some(ProgressSource::new(move || {
            let (rank, round) = (*p.lock().unwrap())?;
            f(rank, round)
        }));
        let mut m = match &agent {
            Some(a) => a.rank_reporting(progress).await.expect("a stream"),
            None => {
                let cfg = ClientConfig {
                    progress,
                    ..cfg.clone()
                };
                connector.connect(&cfg).await.expect("connect")
            }
        };
        m.join(Membership {
            job: job.into(),
            member: format!("m{i}"),
            node: agent_node.unwrap_or("n0").into(),
            addrs: vec![format!("127.0.0.1:{}", 40000 + i)],
            host: Vec::new(),
            role: Role::Worker,
            spec: JobSpec::fixed(n),
        })
        .await
        .expect("join");
        members.push((m, place));
    }
    let mut out = Vec::new();
    for (mut m, place) in members {
        let w = m.wait_welcome(wait).await.expect("welcome");
        *place.lock().unwrap() = Some((w.rank, w.round));
        out.push(m);
    }
    (out, agent)
}
