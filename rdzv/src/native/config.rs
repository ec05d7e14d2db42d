//! Where the native server is and how to trust it: the client's settings, shared by the
//! client (`client.rs`) and its session task (`session.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dt_rdzv_proto::native::Progress;

use super::tls::Trust;

/// Default native port of `dt-rdzv serve`.
pub const DEFAULT_NATIVE_PORT: u16 = dt_rdzv_proto::ports::NATIVE;

/// Where the server is and how to trust it.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` of the native port (port 29401 if left out), or several separated by commas
    /// (servers sharing one job state, e.g. on one etcd, or a standby): the first that answers
    /// is used, and a member whose server goes silent rejoins through the next.
    pub endpoint: String,
    /// The job's join token.
    pub token: String,
    /// How to trust the server's certificate.
    pub trust: Trust,
    /// Name sent in the TLS handshake (checked only with [`Trust::CaFile`]).
    pub server_name: String,
    /// Deadline for the connection and for each request's answer.
    pub timeout: Duration,
    /// How long a member whose connection is lost without the server meaning it (a server
    /// restart, a network failure) keeps reconnecting to rejoin and resume its round; `None`:
    /// it does not, and the loss is an error at once.
    pub reconnect: Option<Duration>,
    /// The job these connections are for, when known before joining. With several endpoints,
    /// every client of one job then tries the servers in the same order (highest random
    /// weight of job and address), whatever order each was given them in, so the members of
    /// a job meet on one server (which claims the job) instead of being redirected to its
    /// owner with a second handshake. `None`: the order given.
    pub affinity: Option<String>,
    /// Where the member's summary of its collective calls comes from: when set, each
    /// heartbeat carries it ([`ClientMsg::Progress`](dt_rdzv_proto::native::ClientMsg)), so
    /// that the server can say why a job is stuck (`dt-rdzv status --hang`).
    pub progress: Option<ProgressSource>,
}

/// A member's summary of its calls, asked for at every heartbeat (every 0.5 s by default): it
/// must be cheap and must not block. `None`: send a plain heartbeat this time.
#[derive(Clone)]
pub struct ProgressSource(pub Arc<dyn Fn() -> Option<Progress> + Send + Sync>);

impl ProgressSource {
    /// A source from a closure.
    pub fn new(f: impl Fn() -> Option<Progress> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// The summary now, if any.
    pub fn summary(&self) -> Option<Progress> {
        (self.0)()
    }
}

impl fmt::Debug for ProgressSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressSource(..)")
    }
}

impl ClientConfig {
    /// Settings with the server name `localhost`, a 30 s deadline and a 60 s reconnect window.
    pub fn new(endpoint: impl Into<String>, token: impl Into<String>, trust: Trust) -> Self {
        Self {
            endpoint: endpoint.into(),
            token: token.into(),
            trust,
            server_name: "localhost".into(),
            timeout: Duration::from_secs(30),
            reconnect: Some(Duration::from_secs(60)),
            affinity: None,
            progress: None,
        }
    }
}
