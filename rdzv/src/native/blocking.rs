//! The blocking native client, for callers without an async runtime (the collective engine,
//! Python bindings): a private one-worker tokio runtime runs the connection and heartbeats,
//! so heartbeats continue while the caller computes.

use std::time::Duration;

use dt_rdzv_proto::native::member::Rounds;
use dt_rdzv_proto::native::{JobStatus, Peer, ServerMsg, Welcome};

use super::client::{Joined, Membership, NativeClient};
use super::config::ClientConfig;
use super::error::NativeError;

/// A [`NativeClient`] with its own runtime. See the module docs.
#[derive(Debug)]
pub struct BlockingNativeClient {
    inner: Option<NativeClient>,
    rt: tokio::runtime::Runtime,
}

impl BlockingNativeClient {
    /// Connects (deadline: `cfg.timeout`).
    pub fn connect(cfg: &ClientConfig) -> Result<Self, NativeError> {
        let rt = Self::runtime()?;
        let inner = rt.block_on(NativeClient::connect(cfg))?;
        Ok(Self {
            inner: Some(inner),
            rt,
        })
    }

    /// [`Self::connect`], asking `stop` at least every 100 ms while the connection is made
    /// (the QUIC handshake may take the whole connect timeout): `stop`'s error ends the wait at
    /// once (Ctrl-C in a Python caller), as the outer error.
    pub fn connect_until<E>(
        cfg: &ClientConfig,
        mut stop: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<Self, NativeError>, E> {
        let rt = match Self::runtime() {
            Ok(rt) => rt,
            Err(e) => return Ok(Err(e)),
        };
        let connected = rt.block_on(async {
            let connect = NativeClient::connect(cfg);
            tokio::pin!(connect);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
            loop {
                tokio::select! {
                    r = &mut connect => return Ok(r),
                    _ = tick.tick() => stop()?,
                }
            }
        })?;
        Ok(connected.map(|inner| Self {
            inner: Some(inner),
            rt,
        }))
    }

    fn runtime() -> Result<tokio::runtime::Runtime, NativeError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dt-rdzv-client")
            .enable_all()
            .build()
            .map_err(|e| NativeError::Config(format!("cannot start the client runtime: {e}")))
    }

    fn client(&mut self) -> &mut NativeClient {
        self.inner.as_mut().expect("client present until dropped")
    }

    /// A handle for the rest of the process. See [`NativeClient::handle`].
    pub fn handle(&mut self) -> super::MemberHandle {
        self.client().handle()
    }

    /// Joins a job. See [`NativeClient::join`].
    pub fn join(&mut self, who: Membership) -> Result<Joined, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.join(who))
    }

    /// Joins and waits for the first welcome: the one call most members need.
    pub fn join_and_wait(
        &mut self,
        who: Membership,
        timeout: Duration,
    ) -> Result<Welcome, NativeError> {
        self.join(who)?;
        self.wait_welcome(timeout)
    }

    /// Waits for the next welcome. See [`NativeClient::wait_welcome`].
    pub fn wait_welcome(&mut self, timeout: Duration) -> Result<Welcome, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.wait_welcome(timeout))
    }

    /// The next pushed message, waiting at most `timeout`.
    pub fn next_message(&mut self, timeout: Duration) -> Result<ServerMsg, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.next_message(timeout))
    }

    /// A pushed message already received (round ended, pending joiners, config), if any:
    /// what a training loop checks between steps.
    pub fn try_message(&mut self) -> Option<Result<ServerMsg, NativeError>> {
        self.client().try_message()
    }

    /// What this member knows of its rounds. See [`NativeClient::rounds`].
    pub fn rounds<T>(&self, f: impl FnOnce(&mut Rounds) -> T) -> T {
        self.inner
            .as_ref()
            .expect("client present until dropped")
            .rounds(f)
    }

    /// The latest welcome.
    pub fn current(&self) -> Option<&Welcome> {
        self.inner.as_ref()?.current()
    }

    /// The published configuration.
    pub fn config(&self) -> Option<&std::collections::BTreeMap<String, Vec<u8>>> {
        self.inner.as_ref().map(|c| c.config())
    }

    /// Publishes a configuration entry.
    pub fn publish(&mut self, key: &str, value: Vec<u8>) -> Result<(), NativeError> {
        self.client().publish(key, value)
    }

    /// Relays the summaries this member's workers published in their store.
    pub fn relay(
        &mut self,
        world: u32,
        workers: Vec<dt_rdzv_proto::native::Relayed>,
    ) -> Result<(), NativeError> {
        self.client().relay(world, workers)
    }

    /// Asks for a new round now.
    pub fn next_round(&mut self) -> Result<(), NativeError> {
        self.client().next_round()
    }

    /// Addresses of some ranks.
    pub fn lookup(&mut self, ranks: Vec<u32>) -> Result<Vec<Peer>, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.lookup(ranks))
    }

    /// The peers at `ranks` however many they are ([`NativeClient::lookup_all`]).
    pub fn lookup_all(&mut self, ranks: &[u32]) -> Result<Vec<Peer>, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.lookup_all(ranks))
    }

    /// Status of one job or all.
    pub fn status(&mut self, job: Option<&str>) -> Result<Vec<JobStatus>, NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.status(job))
    }

    /// Stops a job.
    pub fn stop(&mut self, job: &str, reason: &str) -> Result<(), NativeError> {
        let c = self.inner.as_mut().expect("client");
        self.rt.block_on(c.stop(job, reason))
    }

    /// Leaves the job for good.
    pub fn leave(mut self) -> Result<(), NativeError> {
        let c = self.inner.take().expect("client");
        self.rt.block_on(c.leave())
    }

    /// Marks the job finished.
    pub fn finish(mut self) -> Result<(), NativeError> {
        let c = self.inner.take().expect("client");
        self.rt.block_on(c.finish())
    }
}

impl Drop for BlockingNativeClient {
    fn drop(&mut self) {
        if let Some(c) = self.inner.take() {
            self.rt.block_on(c.close("client dropped"));
        }
    }
}
