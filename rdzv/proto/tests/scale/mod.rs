//! A large-scale harness for the rendezvous machine: `n` simulated members on a virtual clock
//! form one job, heartbeat in steady state and re-form after a loss. The inputs are built
//! before each phase, so that what a phase runs is the machine (and the harness's thin loop);
//! the machine's outputs are kept and tallied afterwards (encoded as the server would send
//! them), so that the encoding can be measured apart. Shared by `tests/scale_work.rs` (work
//! counted at N and 2N) and `examples/scale_sim.rs` (CPU time and memory up to 100k).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use dt_rdzv_proto::native::{ClientMsg, JobSpec, Join, Role, ServerMsg, encode_server};
use dt_rdzv_proto::rendezvous::{
    Action, ConnId, Input, MachineConfig, RendezvousMachine, job_token,
};

/// The server token of the simulated server.
pub const SERVER_TOKEN: &str = "scale-s3cret";
/// The simulated job.
pub const JOB: &str = "scale";
/// Members per node (as `rdzv_perf --native` names them).
pub const PER_NODE: u64 = 8;
/// Joins arrive this far apart on the virtual clock (100,000 a second: 100k members gather in
/// one virtual second, under the heartbeat timeout, as a herd that connects at once does).
pub const JOIN_GAP: Duration = Duration::from_micros(10);

/// What one phase sent, tallied from the machine's actions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Actions of any kind.
    pub actions: u64,
    /// `Send` actions.
    pub sends: u64,
    /// Of those, welcomes.
    pub welcomes: u64,
    /// `Close` actions.
    pub closes: u64,
    /// Events.
    pub events: u64,
    /// Bytes of every sent message, encoded as the server sends them.
    pub bytes: u64,
    /// Bytes of welcomes.
    pub welcome_bytes: u64,
    /// The largest welcome, in bytes.
    pub max_welcome_bytes: u64,
    /// The most peers one welcome carried.
    pub max_peers: usize,
}

/// One simulated server and its `n` members (connection `i` is member `i`).
pub struct Scale {
    /// The machine under test.
    pub m: RendezvousMachine,
    /// The virtual clock.
    pub now: Instant,
    /// Members.
    pub n: u64,
    /// The machine's actions since the last tally.
    pub out: Vec<Action>,
    /// `handle` and `handle_timeout` calls (machine steps) since the start.
    pub steps: u64,
    per_node: u64,
    spec: JobSpec,
    token: String,
}

impl Scale {
    /// A server and the spec of a job of `n` members that re-forms at once after one loss
    /// (min `n - 1`, max `n`: the first round completes when the last member joins).
    pub fn new(n: u64) -> Self {
        let config = MachineConfig {
            token: Some(SERVER_TOKEN.into()),
            ..MachineConfig::default()
        };
        let n32 = u32::try_from(n).expect("n fits u32");
        Self {
            m: RendezvousMachine::new(config),
            now: Instant::now(),
            n,
            out: Vec::new(),
            steps: 0,
            per_node: PER_NODE,
            spec: JobSpec::elastic(n32.saturating_sub(1).max(1), n32),
            token: job_token(SERVER_TOKEN, JOB),
        }
    }

    /// `per` members to a node instead of [`PER_NODE`] (`u64::MAX`: all on one).
    pub fn per_node(self, per: u64) -> Self {
        Self {
            per_node: per.max(1),
            ..self
        }
    }

    /// The connect and join of every member, on the virtual clock from now (untimed: build
    /// before the phase).
    pub fn joins(&self) -> Vec<(Instant, Input)> {
        let mut v = Vec::with_capacity(2 * self.n as usize);
        for i in 0..self.n {
            let at = self.now + JOIN_GAP * (i as u32);
            let node = format!("node{:05}", i / self.per_node);
            v.push((
                at,
                Input::Connected {
                    conn: i,
                    observed_ip: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                },
            ));
            v.push((
                at,
                Input::Message {
                    conn: i,
                    msg: ClientMsg::Join(Join {
                        job: JOB.into(),
                        token: self.token.clone(),
                        member: format!("{node}:{}", i % self.per_node),
                        node: node.clone(),
                        addrs: vec![format!(
                            "10.{}.{}.{}:29500",
                            i >> 16,
                            (i >> 8) & 255,
                            i & 255
                        )],
                        host: vec![0u8; 32],
                        role: Role::Worker,
                        spec: self.spec.clone(),
                        resume: None,
                    }),
                },
            ));
        }
        v
    }

    /// Feeds timed inputs in order, running the machine's deadlines as they fall due (as a
    /// driver does: it asks `poll_timeout` after every input).
    pub fn feed(&mut self, inputs: impl IntoIterator<Item = (Instant, Input)>) {
        for (at, input) in inputs {
            self.run_until(at);
            self.now = self.now.max(at);
            self.m.handle(self.now, input);
            self.steps += 1;
            self.drain();
        }
    }

    /// Runs deadlines up to `until`.
    pub fn run_until(&mut self, until: Instant) {
        while let Some(t) = self.m.poll_timeout() {
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            self.m.handle_timeout(self.now);
            self.steps += 1;
            self.drain();
        }
        self.now = self.now.max(until);
    }

    fn drain(&mut self) {
        while let Some(a) = self.m.poll_action() {
            self.out.push(a);
        }
    }

    /// `secs` of steady state from now: every member that is still connected sends a
    /// heartbeat every `heartbeat_interval`, spread evenly over the interval. Generated on the
    /// fly (a heartbeat costs nothing to build).
    pub fn steady(&mut self, secs: u32, gone: &[ConnId]) {
        let step = self.m.config().heartbeat_interval;
        let n = self.n;
        let start = self.now;
        let beats = u64::from(secs) * (Duration::from_secs(1).as_nanos() / step.as_nanos()) as u64;
        for k in 0..beats {
            let base = start + step * (k as u32);
            let inputs = (0..n).filter(|c| !gone.contains(c)).map(|c| {
                let at = base + step.mul_f64(c as f64 / n as f64);
                (
                    at,
                    Input::Message {
                        conn: c,
                        msg: ClientMsg::Heartbeat { seq: k },
                    },
                )
            });
            self.feed(inputs);
        }
    }

    /// Member `conn`'s connection closes (its process died).
    pub fn lose(&mut self, conn: ConnId) {
        let at = self.now;
        self.feed([(
            at,
            Input::Closed {
                conn,
                why: "process killed".into(),
            },
        )]);
    }

    /// Tallies (and forgets) the actions since the last tally, encoding each message.
    pub fn tally(&mut self) -> Tally {
        let mut t = Tally::default();
        // Taken, not drained: the list's capacity would count as the machine's memory.
        for a in std::mem::take(&mut self.out) {
            t.actions += 1;
            match a {
                Action::Send { msg, .. } => {
                    t.sends += 1;
                    let b = encode_server(&msg).len() as u64;
                    t.bytes += b;
                    if let ServerMsg::Welcome(w) = &msg {
                        t.welcomes += 1;
                        t.welcome_bytes += b;
                        t.max_welcome_bytes = t.max_welcome_bytes.max(b);
                        t.max_peers = t.max_peers.max(w.peers.len());
                    }
                }
                Action::Close { .. } => t.closes += 1,
                Action::Event(_) => t.events += 1,
            }
        }
        t
    }
}
