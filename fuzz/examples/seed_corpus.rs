//! Writes a seed corpus for the fuzz targets: valid request streams and frame streams, so that
//! the fuzzer starts from inputs that get past the decoders into the engine and the machine.
//!
//! Usage: `cargo run --manifest-path fuzz/Cargo.toml --example seed_corpus -- fuzz/corpus`
//! (writes `<dir>/tcpstore_decode/seed-*` and `<dir>/native_decode/seed-*`; `scripts/fuzz.sh`
//! runs it).

use std::path::Path;

use dt_rdzv_proto::native::{
    ClientMsg, JobEnd, JobSpec, JobStatus, Join, LateJoin, MemberStatus, Peer, RefusalCode, Resume,
    Role, RoundCause, ServerMsg, Welcome, encode_client, encode_server,
};
use dt_rdzv_proto::rendezvous::job_token;
use dt_rdzv_proto::tcpstore::{Request, VALIDATE_MAGIC};

/// The server token the `native_decode` target's machine is configured with.
const TOKEN: &str = "t";

fn write(dir: &Path, name: &str, first: u8, body: &[u8]) {
    std::fs::create_dir_all(dir).expect("create corpus dir");
    let mut bytes = vec![first];
    bytes.extend_from_slice(body);
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
}

fn requests(reqs: &[Request]) -> Vec<u8> {
    let mut out = Vec::new();
    reqs.iter().for_each(|r| r.encode_into(&mut out));
    out
}

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn tcpstore(dir: &Path) {
    use Request as R;
    let state = k("/torch.rendezvous.job");
    let every = vec![
        R::Validate {
            magic: VALIDATE_MAGIC,
        },
        R::Set {
            key: k("/k"),
            value: k("v"),
        },
        R::CompareSet {
            key: state.clone(),
            expected: vec![],
            desired: k("state"),
        },
        R::Get { key: k("/k") },
        R::Add {
            key: k("/c"),
            delta: 1,
        },
        R::Check {
            keys: vec![k("/k"), k("/missing")],
        },
        R::Wait {
            keys: vec![k("/k")],
        },
        R::GetNumKeys,
        R::DeleteKey { key: k("/k") },
        R::Append {
            key: k("/a"),
            value: k("xy"),
        },
        R::MultiGet {
            keys: vec![k("/a"), k("/c")],
        },
        R::MultiSet {
            pairs: vec![(k("/m1"), k("1")), (k("/m2"), k("2"))],
        },
        R::CancelWait,
        R::Ping { nonce: 9263 },
        R::QueuePush {
            key: k("/q"),
            value: k("item"),
        },
        R::QueuePop { key: k("/q") },
        R::QueueLen { key: k("/q") },
        R::ListKeys,
        R::Barrier {
            key: k("/b"),
            world_size: 1,
        },
    ];
    for r in &every {
        write(
            dir,
            &format!("op-{}", r.query_type().name()),
            255,
            &r.encode(),
        );
    }
    // Everything but VALIDATE (the target has validated already), in one stream.
    write(dir, "all-ops", 7, &requests(&every[1..]));
    // A torchelastic round: state compare-set, round keys, a wait that a set releases, a
    // barrier of two, and a new run that finds the old state abandoned.
    let round = |s: &str| k(&format!("/torch.rendezvous.job.0/{s}"));
    write(
        dir,
        "torchelastic",
        3,
        &requests(&[
            R::CompareSet {
                key: state.clone(),
                expected: vec![],
                desired: k("s0"),
            },
            R::CompareSet {
                key: state.clone(),
                expected: k("s0"),
                desired: k("s1"),
            },
            R::Wait {
                keys: vec![round("MASTER_ADDR"), round("MASTER_PORT")],
            },
            R::MultiSet {
                pairs: vec![
                    (round("MASTER_ADDR"), k("10.0.0.1")),
                    (round("MASTER_PORT"), k("29500")),
                ],
            },
            R::Add {
                key: round("count"),
                delta: 2,
            },
            R::Barrier {
                key: round("barrier"),
                world_size: 2,
            },
            R::Barrier {
                key: round("barrier"),
                world_size: 2,
            },
            R::QueuePop { key: round("q") },
            R::QueuePush {
                key: round("q"),
                value: k("x"),
            },
            R::CompareSet {
                key: state,
                expected: vec![],
                desired: k("again"),
            },
        ]),
    );
    // ADD on a value that is not a counter closes the connection.
    write(
        dir,
        "counter-error",
        1,
        &requests(&[
            R::Set {
                key: k("/c"),
                value: k("not a number"),
            },
            R::Add {
                key: k("/c"),
                delta: 1,
            },
            R::GetNumKeys,
        ]),
    );
}

fn join(job: &str, member: &str, token: String, role: Role, spec: JobSpec) -> ClientMsg {
    ClientMsg::Join(Join {
        job: job.into(),
        token,
        member: member.into(),
        node: "host-a".into(),
        addrs: vec!["10.0.0.1:29500".into(), "[fe80::1]:29500".into()],
        host: vec![1; 32],
        role,
        spec,
        resume: None,
    })
}

/// A join after a server restart, asking for rank `rank` of round 3 of a round of `world`.
fn resume(job: &str, member: &str, rank: u32, world: u32, spec: JobSpec) -> ClientMsg {
    let ClientMsg::Join(mut j) = join(job, member, TOKEN.into(), Role::Worker, spec) else {
        unreachable!()
    };
    j.resume = Some(Resume {
        round: 3,
        rank,
        world,
        restarts: 1,
    });
    ClientMsg::Join(j)
}

fn frames(msgs: &[ClientMsg]) -> Vec<u8> {
    msgs.iter().flat_map(encode_client).collect()
}

fn native(dir: &Path) {
    let t = || TOKEN.to_string();
    let status = |job: Option<&str>| ClientMsg::Status {
        token: t(),
        job: job.map(Into::into),
    };
    // A job of one: joins, is welcomed, uses every member request, finishes.
    write(
        dir,
        "fixed-1",
        0,
        &frames(&[
            join("job-1", "a:0", t(), Role::Main, JobSpec::fixed(1)),
            ClientMsg::Heartbeat { seq: 1 },
            ClientMsg::Publish {
                key: "MASTER_ADDR".into(),
                value: b"10.0.0.1".to_vec(),
            },
            ClientMsg::Lookup {
                ranks: vec![0, 1, 7],
            },
            ClientMsg::NextRound,
            status(None),
            status(Some("job-1")),
            ClientMsg::Finish,
        ]),
    );
    // An elastic job that waits for its last call, joined with a job token, then stopped.
    write(
        dir,
        "elastic-job-token",
        13,
        &frames(&[
            join(
                "job-2",
                "b:0",
                job_token(TOKEN, "job-2"),
                Role::Worker,
                JobSpec::elastic(1, 4),
            ),
            ClientMsg::Heartbeat { seq: 1 },
            ClientMsg::Stop {
                token: job_token(TOKEN, "job-2"),
                job: "job-2".into(),
                reason: "operator".into(),
            },
        ]),
    );
    // Every spec knob set, then the member leaves.
    let spec = JobSpec {
        min_members: 1,
        max_members: 2,
        max_spares: 1,
        last_call_ms: 0,
        join_timeout_ms: 5_000,
        max_rounds: 2,
        max_restarts: Some(1),
        late_join: LateJoin::OnRequest,
        ephemeral: true,
        ttl_ms: Some(60_000),
        full_peer_table_max: 0,
    };
    write(
        dir,
        "spec-knobs",
        40,
        &frames(&[
            join("job-3", "c:0", t(), Role::Main, spec),
            ClientMsg::NextRound,
            ClientMsg::Leave,
        ]),
    );
    // A job of two that never forms: join timeout.
    write(
        dir,
        "join-timeout",
        5,
        &frames(&[join("job-4", "d:0", t(), Role::Worker, JobSpec::fixed(2))]),
    );
    // A server restart: the member takes back its rank, alone (the round completes again) or
    // as one of two (the other never comes back: the resume window passes).
    write(
        dir,
        "resume-1",
        9,
        &frames(&[
            resume("job-7", "g:0", 0, 1, JobSpec::fixed(1)),
            ClientMsg::Heartbeat { seq: 1 },
            ClientMsg::Leave,
        ]),
    );
    write(
        dir,
        "resume-2",
        20,
        &frames(&[resume("job-8", "h:1", 1, 2, JobSpec::elastic(1, 2))]),
    );
    // Refusals: a request before joining, a bad token, an unknown job, a second join.
    write(
        dir,
        "not-joined",
        0,
        &frames(&[ClientMsg::Heartbeat { seq: 0 }]),
    );
    write(
        dir,
        "bad-token",
        0,
        &frames(&[join(
            "job-5",
            "e:0",
            "wrong".into(),
            Role::Worker,
            JobSpec::fixed(1),
        )]),
    );
    write(
        dir,
        "operator",
        2,
        &frames(&[
            status(Some("nope")),
            ClientMsg::Stop {
                token: t(),
                job: "nope".into(),
                reason: "r".into(),
            },
        ]),
    );
    write(
        dir,
        "second-join",
        30,
        &frames(&[
            join("job-6", "f:0", t(), Role::Worker, JobSpec::fixed(1)),
            join("job-6", "f:1", t(), Role::Worker, JobSpec::fixed(1)),
        ]),
    );
    // Server messages, for the `decode_server` side.
    let peer = Peer {
        rank: 0,
        member: "a:0".into(),
        node: "host-a".into(),
        addrs: vec!["10.0.0.1:29500".into()],
        host: vec![1; 32],
        observed_ip: "10.0.0.1".into(),
    };
    let server = [
        ServerMsg::Joined {
            job: "j".into(),
            round: 1,
            spare: false,
            heartbeat_interval_ms: 2_000,
        },
        ServerMsg::Welcome(Welcome {
            job: "j".into(),
            round: 1,
            cause: RoundCause::MemberLost {
                member: "b:0".into(),
                rank: 1,
                why: "silent".into(),
            },
            rank: 0,
            world: 1,
            local_rank: 0,
            local_world: 1,
            node_rank: 0,
            nodes: 1,
            peers: vec![peer.clone()],
            all_peers: true,
            config: vec![("k".into(), b"v".to_vec())],
            heartbeat_interval_ms: 500,
            heartbeat_timeout_ms: 2_000,
            restarts: 1,
        }),
        ServerMsg::Peers(vec![peer]),
        ServerMsg::JobEnded {
            job: "j".into(),
            end: JobEnd::JoinTimeout {
                round: 2,
                have: 1,
                min: 2,
                waited_ms: 600_000,
                missing: vec!["b:0".into()],
            },
        },
        ServerMsg::Refused {
            code: RefusalCode::SpecMismatch,
            message: "m".into(),
        },
        ServerMsg::Status(vec![JobStatus {
            job: "j".into(),
            state: "running".into(),
            round: 1,
            world: 1,
            spec: JobSpec::default(),
            members: vec![MemberStatus {
                member: "a:0".into(),
                node: "host-a".into(),
                state: "active".into(),
                rank: Some(0),
                role: Role::Main,
                last_seen_ms: 10,
                addrs: vec![],
                observed_ip: String::new(),
            }],
            missing: vec![],
            restarts: 0,
            age_ms: 100,
            config_keys: vec!["k".into()],
        }]),
    ];
    let bytes: Vec<u8> = server.iter().flat_map(encode_server).collect();
    write(dir, "server-msgs", 0, &bytes);
}

fn main() {
    let root = std::env::args_os()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let root = Path::new(&root);
    tcpstore(&root.join("tcpstore_decode"));
    native(&root.join("native_decode"));
}
