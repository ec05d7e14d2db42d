//! The native path: a member binds its data listener *before* it joins (so the address goes
//! in its `Join`), and builds its communicator from the round's `Welcome`: the peers'
//! addresses from the peer table, the link secret derived from the job's token and the round
//! number. No store, no keys: nothing of the job is readable through a TCPStore port.
//!
//! The secret is `HMAC-SHA256(job token, "dtcomm data plane v1\0" + job + "\0" + round)`, the
//! job token being `dt-rdzv`'s derivation from the server token (members may hold either). A
//! server restart rebuilds a round from its members' resumes with the same number, so a
//! resumed round keeps its secret; a new round gets a new one, which fences connections of
//! an earlier round.

use std::net::SocketAddr;

use ring::hmac;

use super::{Bound, bind, mesh};
use crate::config::{Config, Options};
use crate::error::CommError;
use crate::transport::tcp::TcpTransport;
use crate::transport::tcp::handshake::Auth;
use crate::transport::tcp::setup::Setup;

const CONTEXT: &[u8] = b"dtcomm data plane v1\0";

/// The data-plane secret of `round` of `job`, from the token a member joined with (the
/// server's token or the job's, `dtj1_...`; empty on a server without authentication, where
/// the secret only fences rounds).
pub fn round_secret(token: &str, job: &str, round: u64) -> [u8; 32] {
    let base = if token.starts_with(dt_rdzv_proto::rendezvous::JOB_TOKEN_PREFIX) {
        token.to_owned()
    } else {
        dt_rdzv_proto::rendezvous::job_token(token, job)
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, base.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(CONTEXT);
    ctx.update(job.as_bytes());
    ctx.update(b"\0");
    ctx.update(round.to_string().as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

const STORE_CONTEXT: &[u8] = b"dtcomm store path v1\0";

/// The link secret a launcher hands the workers of `round` of `job` for the store path
/// (`DTCOMM_LINK_SECRET`), derived like [`round_secret`] but for another purpose: the workers'
/// store (torch's `env://` on node 0, which has no authentication) then never holds it, and a
/// stranger who reads that store cannot pass the data-plane handshake.
pub fn store_link_secret(token: &str, job: &str, round: u64) -> [u8; 32] {
    let round_key = round_secret(token, job, round);
    let key = hmac::Key::new(hmac::HMAC_SHA256, &round_key);
    let mut out = [0u8; 32];
    out.copy_from_slice(hmac::sign(&key, STORE_CONTEXT).as_ref());
    out
}

/// A bound, listening data socket, made before joining a native job; its [`addr`] goes in
/// the `Join`. It serves every round of the membership: `Communicator::from_welcome`
/// builds each round's communicator over a clone of it, and the handshake's round number
/// drops connections meant for another round.
///
/// [`addr`]: DataListener::addr
pub struct DataListener {
    bound: Bound,
    config: Config,
}

impl std::fmt::Debug for DataListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DataListener({} on {})",
            self.bound.addr, self.bound.iface
        )
    }
}

impl DataListener {
    /// Resolves `opts` (with their `DTCOMM_*` twins) and listens on the chosen interface.
    pub fn bind(opts: &Options) -> Result<DataListener, CommError> {
        let config = Config::resolve(opts).map_err(|detail| CommError::Setup {
            rank: 0,
            elapsed: std::time::Duration::ZERO,
            detail,
        })?;
        let bound = bind(0, &config)?;
        tracing::info!(address = %bound.addr, interface = %bound.iface, "dtcomm: data listener bound");
        Ok(DataListener { bound, config })
    }

    /// Listens as a communicator built with `config` would (its interface, timeouts and
    /// transport settings): for a communicator of some of its ranks
    /// (`Communicator::subset`).
    pub(crate) fn bind_like(config: &Config) -> Result<DataListener, CommError> {
        let bound = bind(0, config)?;
        Ok(DataListener {
            bound,
            config: config.clone(),
        })
    }

    /// The address peers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.bound.addr
    }

    /// What this process advertises about its host beside [`addr`](Self::addr) (the native
    /// `Join`'s `host`): peers with an equal host part share memory with it.
    pub fn host_record(&self) -> Vec<u8> {
        crate::transport::shm::host::own_record(&self.config).to_vec()
    }

    /// Another handle on the same listening socket.
    pub fn try_clone(&self) -> Result<DataListener, CommError> {
        let listener = self
            .bound
            .listener
            .try_clone()
            .map_err(|e| CommError::Setup {
                rank: 0,
                elapsed: std::time::Duration::ZERO,
                detail: format!("cloning the data listener {}: {e}", self.bound.addr),
            })?;
        Ok(DataListener {
            bound: Bound {
                listener,
                addr: self.bound.addr,
                iface: self.bound.iface.clone(),
            },
            config: self.config.clone(),
        })
    }
}

/// Where a round's peers listen and what proves a link: the parts of a `Welcome` the
/// communicator needs.
#[derive(Debug, Clone)]
pub struct RoundPeers {
    /// The job.
    pub job: String,
    /// The round (its number fences connections of other rounds).
    pub round: u64,
    /// This rank.
    pub rank: usize,
    /// Ranks in the round.
    pub world: usize,
    /// Indexed by rank: where it listens (every lower rank must be known; others may be
    /// `None`).
    pub addrs: Vec<Option<SocketAddr>>,
    /// Indexed by rank: the host record it advertised ([`DataListener::host_record`]), when
    /// the peer table is whole and every member sent one; else empty (the shared-memory
    /// set-up then exchanges them over the links).
    pub hosts: Vec<Vec<u8>>,
}

/// What [`welcome_mesh`] builds: the listener's settings, the transport, and every rank's host
/// record when the welcome had them all.
pub(crate) struct RoundLinks {
    pub config: Config,
    pub transport: TcpTransport,
    pub hosts: Option<Vec<Vec<u8>>>,
}

/// The links of rank `peers.rank` of a native round over `listener` (bound before joining):
/// links to the peers at their `Welcome` addresses open when a call first needs them (this
/// rank dials lower ranks and is dialed by higher ones), every link proving it holds `secret`
/// for this job and round ([`round_secret`]). `Communicator::from_welcome` builds on them.
pub(crate) fn welcome_mesh(
    listener: DataListener,
    peers: &RoundPeers,
    secret: &[u8],
) -> Result<RoundLinks, CommError> {
    let (rank, world) = (peers.rank, peers.world);
    let config = listener.config;
    let su = Setup::new(rank, world, &config);
    if world == 0 || rank >= world || world > u32::MAX as usize / 2 {
        return Err(su.err(format!("rank {rank} is not in a world of {world}")));
    }
    for p in 0..rank {
        if peers.addrs.get(p).copied().flatten().is_none() {
            return Err(su.err(format!(
                "job {:?} round {}: the welcome has no address for rank {p}",
                peers.job, peers.round
            )));
        }
    }
    let addrs = (0..world)
        .map(|p| peers.addrs.get(p).copied().flatten())
        .collect();
    tracing::info!(rank, world, job = %peers.job, round = peers.round, "dtcomm config: {config}");
    let auth = Auth::new(secret, format!("job {:?} round {}", peers.job, peers.round));
    let transport = mesh(&su, &auth, listener.bound, addrs)?;
    let hosts = (peers.hosts.len() == world && peers.hosts.iter().all(|h| !h.is_empty()))
        .then(|| peers.hosts.clone());
    Ok(RoundLinks {
        config,
        transport,
        hosts,
    })
}
