//! The messages of the native rendezvous protocol, one enum per direction.
//!
//! Every type derives rkyv's `Archive`, `Serialize` and `Deserialize`; [`super::codec`] puts
//! them behind magic, version and length. Durations travel as milliseconds (`*_ms`), addresses
//! as strings (`host:port`, IPv6 in brackets), so the wire format depends on nothing but rkyv.

use std::sync::Arc;

use rkyv::with::Unshare;
use rkyv::{Archive, Deserialize, Serialize};

use super::progress::Progress;

/// What a member is to its job.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ordinary member.
    Worker,
    /// The job's main member (OCI `MAIN`): it gets rank 0 whenever it is in a round, it may
    /// publish configuration, and in an ephemeral job its leaving ends the job.
    Main,
}

/// When members that arrive while a round runs are let in.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateJoin {
    /// The running round ends `last_call` after the first late arrival (batching the ones that
    /// come meanwhile), and a new round with everyone starts at once.
    Immediate,
    /// Members are told that joiners wait ([`ServerMsg::Pending`]); the round changes when a
    /// member asks for it ([`ClientMsg::NextRound`], e.g. at a checkpoint) or for another
    /// reason (a loss).
    OnRequest,
}

/// A job's rendezvous settings. The first member to join creates the job with its spec; every
/// later member must send an equal one.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// A round needs at least this many members.
    pub min_members: u32,
    /// A round holds at most this many; more become spares.
    pub max_members: u32,
    /// Spares beyond `max_members` the job keeps waiting (more are refused).
    pub max_spares: u32,
    /// Once `min_members` are present, wait this long for more before the round completes
    /// (it completes at once when `max_members` are present).
    pub last_call_ms: u64,
    /// A round that cannot complete within this time fails the job, naming who is missing
    /// (OCI `OCI__TIMEOUT`).
    pub join_timeout_ms: u64,
    /// Rounds the job may form in all (0: no limit).
    pub max_rounds: u32,
    /// Rounds the job may start because a member was lost (`None`: no limit).
    pub max_restarts: Option<u32>,
    /// When late joiners enter.
    pub late_join: LateJoin,
    /// The job ends when its main member leaves, and is forgotten at once when it ends
    /// (OCI `OCI__EPHEMERAL`).
    pub ephemeral: bool,
    /// The job ends (expires) this long after it was created (`None`: never).
    pub ttl_ms: Option<u64>,
    /// Up to this world size a `Welcome` carries every member's addresses; above it, only the
    /// peers a member's rank talks to in rings and trees (and its host), the rest on request.
    /// The server takes at most
    /// [`MAX_FULL_PEER_TABLE`](crate::rendezvous::defaults::MAX_FULL_PEER_TABLE) (every
    /// member's welcome is encoded with the whole table: the table's square on the wire).
    pub full_peer_table_max: u32,
}

impl Default for JobSpec {
    /// One to 1024 members, 3 s last call, 600 s join timeout, no limits.
    fn default() -> Self {
        Self {
            min_members: 1,
            max_members: 1024,
            max_spares: 1024,
            last_call_ms: 3_000,
            join_timeout_ms: 600_000,
            max_rounds: 0,
            max_restarts: None,
            late_join: LateJoin::Immediate,
            ephemeral: false,
            ttl_ms: None,
            full_peer_table_max: 64,
        }
    }
}

impl JobSpec {
    /// A fixed-size job of `n` members (min = max = n), the OCI and static-launcher shape.
    pub fn fixed(n: u32) -> Self {
        Self {
            min_members: n,
            max_members: n,
            ..Self::default()
        }
    }

    /// An elastic job of `min..=max` members.
    pub fn elastic(min: u32, max: u32) -> Self {
        Self {
            min_members: min,
            max_members: max,
            ..Self::default()
        }
    }
}

/// A member's request to join a job.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Join {
    /// The job (run id).
    pub job: String,
    /// The job's join token.
    pub token: String,
    /// The member's id, unique within the job (e.g. `host:local_id`); stable across its
    /// restarts so that the server can name it.
    pub member: String,
    /// The host it runs on: members with the same node get local ranks.
    pub node: String,
    /// Addresses its peers may reach it at (its data-plane listeners), best first.
    pub addrs: Vec<String>,
    /// Its host identity, opaque to the server and bounded ([`MAX_HOST_BYTES`]): members with
    /// equal records share a kernel and a network namespace (dtcomm publishes a digest of the
    /// boot id and namespaces, its pid and whether it wants shared memory, so that peers
    /// choose shared memory or TCP per peer without exchanging anything). Empty: unknown.
    pub host: Vec<u8>,
    /// Its role.
    pub role: Role,
    /// The job's settings (creates the job if it does not exist).
    pub spec: JobSpec,
    /// The place this member held in a running round before its connection was lost (a
    /// server restart): a server that does not know the job rebuilds that round from its
    /// members' resumes, so that their ranks and communicators stay valid.
    pub resume: Option<Resume>,
}

/// A member's place in a round, as it asks for it back after reconnecting.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// The round it was welcomed into.
    pub round: u64,
    /// Its rank there.
    pub rank: u32,
    /// That round's world size.
    pub world: u32,
    /// The job's restarts so far.
    pub restarts: u32,
}

/// Client to server.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Join a job; answered by [`ServerMsg::Joined`] or [`ServerMsg::Refused`].
    Join(Join),
    /// Still alive. Any message counts; this one is for quiet periods.
    Heartbeat {
        /// A counter, for logs.
        seq: u64,
    },
    /// Leave the job for good (the others get a new round without this member).
    Leave,
    /// The job is done: every member is told, and the job accepts no more joins.
    Finish,
    /// Publish a configuration entry for the job's members (main member only, or rank 0 of the
    /// round when the job has no main member).
    Publish {
        /// Entry name.
        key: String,
        /// Entry value.
        value: Vec<u8>,
    },
    /// Let waiting late joiners in now (ends the running round).
    NextRound,
    /// Ask for the addresses of some ranks of the current round (answered by
    /// [`ServerMsg::Peers`]).
    Lookup {
        /// The ranks.
        ranks: Vec<u32>,
    },
    /// Operator: describe one job or every job (needs the token).
    Status {
        /// The token.
        token: String,
        /// One job, or all.
        job: Option<String>,
    },
    /// Operator: stop a job (needs the token).
    Stop {
        /// The token.
        token: String,
        /// The job.
        job: String,
        /// Who or what asks, for the members and the log.
        reason: String,
    },
    /// Evidence from the data plane: this member's link to `rank` of `round` broke (a reset,
    /// an end of stream without goodbye, a dead same-host process). Not a verdict: the server
    /// probes the named member ([`ServerMsg::Probe`]) and ends the round only if it does not
    /// answer.
    Report {
        /// The round the reporter and the suspect are in.
        round: u64,
        /// The suspect's rank there.
        rank: u32,
        /// What the reporter saw (truncated by the server).
        evidence: String,
    },
    /// The answer to a [`ServerMsg::Probe`]: this member is alive.
    Alive {
        /// The probe's nonce.
        nonce: u64,
    },
    /// A heartbeat that carries the member's summary of its collective calls (sent instead of
    /// [`ClientMsg::Heartbeat`] by members that record their calls); the server keeps the
    /// latest per member for `dt-rdzv status --hang`.
    Progress(Progress),
    /// This member's call in `round` timed out: ask every other member of the round to dump
    /// its flight recorder now (torch's watchdog tells every rank through its store; here the
    /// server does, once per round), so that a rank in no call leaves its trace too.
    Dump {
        /// The round the call ran in.
        round: u64,
        /// What timed out, for the others' logs (truncated by the server to
        /// [`MAX_DUMP_REASON_BYTES`]).
        why: String,
    },
    /// A node agent's hello, the first message of a connection that speaks for the ranks of
    /// one node: each local rank then joins on a stream of its own on the same connection
    /// (its [`Join`] naming the same job and node), and the agent's heartbeats on this stream
    /// keep all of them alive (one heartbeat per node, not per rank). Answered by
    /// [`ServerMsg::NodeAccepted`] or [`ServerMsg::Refused`] (and closed).
    Node(NodeHello),
    /// From a node agent: one of its local ranks is gone (its process exited, which the agent
    /// saw). Only that rank is lost; the node's other ranks stay.
    RankLost {
        /// The lost rank's member id (it joined on this agent's connection).
        member: String,
        /// What the agent saw (an exit status), for the round's cause.
        why: String,
    },
    /// From a launcher's agent that is this job's member while its workers meet through a
    /// store (`dtrun`): the summaries its workers published there (`dtcomm/progress/<rank>`),
    /// relayed on the connection it holds, so that the server can say why the workers'
    /// collectives hang. Replaces what this member relayed before; at most
    /// [`MAX_RELAYED`] workers.
    Relay {
        /// The workers' world size.
        world: u32,
        /// The latest summary of each of this member's workers that published one.
        workers: Vec<Relayed>,
    },
}

/// Most workers one [`ClientMsg::Relay`] carries (a node's; more are refused).
pub const MAX_RELAYED: usize = 256;

/// One worker's summary in a [`ClientMsg::Relay`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The summary (its `rank`: the worker's global rank).
    pub progress: Progress,
    /// Milliseconds since the worker wrote it, as of sending.
    pub age_ms: u64,
}

/// A node agent's hello ([`ClientMsg::Node`]).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NodeHello {
    /// The job its ranks join.
    pub job: String,
    /// The job's join token.
    pub token: String,
    /// The node it speaks for: every rank joining through it must name this node.
    pub node: String,
}

/// The longest [`ClientMsg::Dump`] reason the server passes on, in bytes.
pub const MAX_DUMP_REASON_BYTES: usize = 512;

/// One member's addresses as a peer sees them.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its rank in the round.
    pub rank: u32,
    /// Its member id.
    pub member: String,
    /// Its node.
    pub node: String,
    /// The addresses it advertised.
    pub addrs: Vec<String>,
    /// The host identity it advertised ([`Join::host`]).
    pub host: Vec<u8>,
    /// The source IP address the server saw its connection come from (empty if unknown).
    pub observed_ip: String,
}

/// The largest [`Join::host`] a server accepts, in bytes.
pub const MAX_HOST_BYTES: usize = 64;

/// Why a round started (or the previous one ended).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum RoundCause {
    /// The job's first round.
    First,
    /// A member stopped answering or its connection closed.
    MemberLost {
        /// Its member id.
        member: String,
        /// Its rank in the ended round.
        rank: u32,
        /// What the server saw.
        why: String,
    },
    /// A member left on purpose.
    MemberLeft {
        /// Its member id.
        member: String,
        /// Its rank in the ended round.
        rank: u32,
    },
    /// Late joiners were let in.
    NewMembers {
        /// How many.
        count: u32,
    },
    /// A member asked for a new round.
    Requested {
        /// Its member id.
        by: String,
    },
    /// The server restarted and the round's members came back with their ranks: the round
    /// goes on as it was (same number, ranks and peers).
    Resumed {
        /// How many members it holds.
        members: u32,
    },
}

/// A member's place in a completed round.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The job.
    pub job: String,
    /// The round number (1 for the first); fence every key of the round with it.
    pub round: u64,
    /// Why this round started.
    pub cause: RoundCause,
    /// Global rank.
    pub rank: u32,
    /// Members in the round.
    pub world: u32,
    /// Rank among the round's members on the same node.
    pub local_rank: u32,
    /// Members of the round on the same node.
    pub local_world: u32,
    /// Index of this node among the round's nodes (ordered by lowest rank).
    pub node_rank: u32,
    /// Nodes in the round.
    pub nodes: u32,
    /// Peers this member needs: everyone when `all_peers`, else rank 0, ring and tree
    /// neighbours, and the same node's members (on a node of more than 64, the node's first
    /// and its ring and tree neighbours there). Ask for others with [`ClientMsg::Lookup`].
    /// The whole table is one copy shared by every welcome of the round; on the wire, a plain
    /// list.
    #[rkyv(with = Unshare)]
    pub peers: Arc<Vec<Peer>>,
    /// Whether `peers` is the whole round.
    pub all_peers: bool,
    /// The job's published configuration: one copy shared by every welcome of a round (and
    /// by its job until an entry changes); on the wire, a plain list.
    #[rkyv(with = Unshare)]
    pub config: Arc<Vec<(String, Vec<u8>)>>,
    /// Send a heartbeat at least this often.
    pub heartbeat_interval_ms: u64,
    /// The server declares a member lost after this long without a message.
    pub heartbeat_timeout_ms: u64,
    /// Rounds started by losses so far.
    pub restarts: u32,
}

/// Why a job ended.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// A member said the job is done (or, in an ephemeral job, the main member left).
    Finished {
        /// That member.
        by: String,
    },
    /// An operator stopped it.
    Stopped {
        /// Who asked, and why.
        reason: String,
    },
    /// A round did not complete within the join timeout.
    JoinTimeout {
        /// The round that did not complete.
        round: u64,
        /// Members present.
        have: u32,
        /// Members needed.
        min: u32,
        /// Milliseconds waited.
        waited_ms: u64,
        /// Members of the previous round that did not come back.
        missing: Vec<String>,
    },
    /// `max_rounds` reached.
    RoundLimit {
        /// The limit.
        rounds: u32,
    },
    /// `max_restarts` reached.
    RestartLimit {
        /// The limit.
        restarts: u32,
    },
    /// The job's TTL passed.
    Expired {
        /// The TTL in milliseconds.
        ttl_ms: u64,
    },
}

/// Why a request was refused (the message says the details).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    /// Wrong or missing token.
    BadToken,
    /// The frame's protocol version is not ours.
    VersionMismatch,
    /// Undecodable bytes.
    Malformed,
    /// A second `Join` on one connection.
    AlreadyJoined,
    /// The member id is held by another live connection.
    MemberTaken,
    /// A second main member.
    MainTaken,
    /// The spec differs from the job's.
    SpecMismatch,
    /// The spec is invalid (e.g. min > max).
    InvalidSpec,
    /// No room, even for a spare.
    JobFull,
    /// The job has ended; the message says how.
    JobEnded,
    /// The server holds as many jobs as it may.
    TooManyJobs,
    /// A member request on a connection that has not joined.
    NotJoined,
    /// Publishing without being the main member (or rank 0).
    NotMain,
    /// No such job.
    UnknownJob,
    /// Anything else that is not allowed.
    BadRequest,
}

/// One member in a status report.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Member id.
    pub member: String,
    /// Node.
    pub node: String,
    /// `active`, `waiting` or `spare`.
    pub state: String,
    /// Rank in the current round, if in it.
    pub rank: Option<u32>,
    /// Main or worker.
    pub role: Role,
    /// Milliseconds since its last message.
    pub last_seen_ms: u64,
    /// Its addresses.
    pub addrs: Vec<String>,
    /// The source IP the server sees.
    pub observed_ip: String,
    /// Its latest summary of its calls, if it sends them.
    pub progress: Option<Progress>,
    /// Milliseconds since that summary arrived.
    pub progress_age_ms: u64,
}

/// One job in a status report.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// The job.
    pub job: String,
    /// `forming`, `running`, or how it ended.
    pub state: String,
    /// The current (or last) round, 0 before the first.
    pub round: u64,
    /// Members in the current round (0 while forming).
    pub world: u32,
    /// The spec.
    pub spec: JobSpec,
    /// Every member the server knows.
    pub members: Vec<MemberStatus>,
    /// Members of the last round that are gone, while a round forms.
    pub missing: Vec<String>,
    /// Rounds started by losses.
    pub restarts: u32,
    /// Milliseconds since the job was created.
    pub age_ms: u64,
    /// Published configuration keys.
    pub config_keys: Vec<String>,
    /// Workers whose summaries the members relay ([`ClientMsg::Relay`]: a launcher's agents
    /// are the members, their workers meet through a store), as if members: rank, the
    /// relaying member and node, silence (the relay's, plus the record's age), summary.
    /// Empty for jobs whose members are the ranks.
    pub workers: Vec<MemberStatus>,
    /// The workers' world size, as relayed (0: none relayed).
    pub workers_world: u32,
}

/// Server to client.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ServerMsg {
    /// The join was accepted; a [`ServerMsg::Welcome`] follows when the round completes.
    Joined {
        /// The job.
        job: String,
        /// The round this member waits for.
        round: u64,
        /// Whether it waits as a spare (beyond `max_members`).
        spare: bool,
        /// Heartbeat interval to keep while waiting, in milliseconds.
        heartbeat_interval_ms: u64,
    },
    /// A round completed: this member's rank and peers.
    Welcome(Welcome),
    /// The round ended for everyone; a new `Welcome` follows when the next one completes
    /// (or `JobEnded`).
    RoundEnded {
        /// The job.
        job: String,
        /// The round that ended.
        round: u64,
        /// Why.
        cause: RoundCause,
    },
    /// Members wait to join (late-join policy `OnRequest`, or during the batching window).
    Pending {
        /// The job.
        job: String,
        /// The running round.
        round: u64,
        /// How many wait.
        waiting: u32,
    },
    /// The main member published a configuration entry.
    Config {
        /// The job.
        job: String,
        /// Entry name.
        key: String,
        /// Entry value: one copy shared by every member's message; on the wire, plain bytes.
        #[rkyv(with = Unshare)]
        value: Arc<Vec<u8>>,
    },
    /// Addresses asked for with [`ClientMsg::Lookup`].
    Peers(Vec<Peer>),
    /// The job ended; the connection closes after this.
    JobEnded {
        /// The job.
        job: String,
        /// How.
        end: JobEnd,
    },
    /// A request was refused. If the connection was not a member, it closes after this.
    Refused {
        /// Machine-readable reason.
        code: RefusalCode,
        /// Human-readable reason naming job, member and round.
        message: String,
    },
    /// Answer to [`ClientMsg::Status`].
    Status(Vec<JobStatus>),
    /// Answer to [`ClientMsg::Stop`].
    Stopped {
        /// The job.
        job: String,
    },
    /// A peer reported this member gone: answer with [`ClientMsg::Alive`] at once (the
    /// client's session does, without the application) or be declared lost.
    Probe {
        /// To echo.
        nonce: u64,
    },
    /// This member was declared lost (silent past the heartbeat timeout, or it did not answer
    /// a probe): the others went on without it; the connection closes after this.
    Removed {
        /// The job.
        job: String,
        /// The round it was in (or waited for).
        round: u64,
        /// What the server saw.
        why: String,
    },
    /// Another server of the group owns the job (`dt-rdzv serve --backend etcd://...`): join
    /// there. The connection closes after this; the client's session reconnects to `endpoint`
    /// (then, if that fails, through its own endpoint list) and sends its join again.
    Redirect {
        /// The job.
        job: String,
        /// The owning server's native endpoint (`host:port`).
        endpoint: String,
        /// Why, for logs.
        why: String,
    },
    /// A member of this member's round asked every member to dump its flight recorder
    /// ([`ClientMsg::Dump`]: its call timed out). Sent once per round.
    Dump {
        /// The job.
        job: String,
        /// The round.
        round: u64,
        /// The asking member's rank.
        rank: u32,
        /// What timed out there.
        why: String,
    },
    /// A node agent's hello was accepted: open a stream per local rank and join on it.
    NodeAccepted {
        /// The job.
        job: String,
        /// Send a heartbeat on the hello stream at least this often.
        heartbeat_interval_ms: u64,
        /// The node's ranks are lost together after this long with no message from it.
        heartbeat_timeout_ms: u64,
        /// At most this many ranks may join through the agent.
        max_ranks: u32,
    },
}
