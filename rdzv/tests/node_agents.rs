//! Node-level liveness over real QUIC on loopback: the ranks of a node join through their
//! node's agent (one connection, one heartbeat for the node), stay alive on its heartbeats
//! alone, are all lost in one round end when the agent goes silent or its connection closes,
//! and one of them alone when the agent reports it or its stream closes. What an agent may not
//! do is refused with the reason.

mod common;
use common::{TOKEN, WAIT, client_cfg as cfg, rt, server_with_token};

use std::time::Duration;

use dt_rdzv::native::{Connector, Membership, NativeClient, NativeError, NodeAgent};
use dt_rdzv::server::BackgroundServer;
use dt_rdzv_proto::native::{JobSpec, RefusalCode, Role, RoundCause, Welcome};

fn who(job: &str, member: &str, node: &str, spec: &JobSpec) -> Membership {
    Membership {
        job: job.into(),
        member: member.into(),
        node: node.into(),
        addrs: vec!["127.0.0.1:40000".into()],
        host: Vec::new(),
        role: Role::Worker,
        spec: spec.clone(),
    }
}

/// Node `node`'s agent and its ranks `{node}-0..n`, joined.
async fn node(
    c: &Connector,
    s: &BackgroundServer,
    job: &str,
    node: &str,
    n: usize,
    spec: &JobSpec,
) -> (NodeAgent, Vec<NativeClient>) {
    let agent = c
        .node_agent(&cfg(s, TOKEN), job, node)
        .await
        .expect("agent accepted");
    assert!(agent.grant().max_ranks >= n as u32);
    let mut ranks = Vec::new();
    for i in 0..n {
        let mut r = agent.rank().await.expect("a stream");
        r.join(who(job, &format!("{node}-{i}"), node, spec))
            .await
            .expect("join through the agent");
        ranks.push(r);
    }
    (agent, ranks)
}

/// Every client's next welcome.
async fn welcomes(ranks: &mut [&mut NativeClient]) -> Vec<Welcome> {
    let mut out = Vec::new();
    for r in ranks.iter_mut() {
        out.push(r.wait_welcome(WAIT).await.expect("welcome"));
    }
    out
}

fn lost_why(w: &Welcome) -> &str {
    match &w.cause {
        RoundCause::MemberLost { why, .. } => why,
        other => panic!("round {} started by {other:?}, not a loss", w.round),
    }
}

#[test]
fn a_nodes_ranks_live_on_its_agents_heartbeats_and_go_together_or_alone() {
    let s = server_with_token(TOKEN);
    rt().block_on(async {
        let job = "nodes";
        let spec = JobSpec::elastic(1, 7);
        let c = Connector::new(&cfg(&s, TOKEN).trust).unwrap();
        let (a, mut ra) = node(&c, &s, job, "a", 2, &spec).await;
        let (mut b, mut rb) = node(&c, &s, job, "b", 2, &spec).await;
        let (cc, mut rc) = node(&c, &s, job, "c", 2, &spec).await;
        // A member on its own connection beside them.
        let mut solo = c.connect(&cfg(&s, TOKEN)).await.unwrap();
        solo.join(who(job, "solo", "d", &spec)).await.unwrap();
        let all: Vec<&mut NativeClient> = ra
            .iter_mut()
            .chain(rb.iter_mut())
            .chain(rc.iter_mut())
            .chain(std::iter::once(&mut solo))
            .collect();
        let mut all = all;
        let ws = welcomes(&mut all).await;
        assert!(ws.iter().all(|w| (w.round, w.world) == (1, 7)), "{ws:?}");
        assert_eq!(ws[0].local_world, 2);

        // Three heartbeat timeouts (2 s each) with no heartbeat from any rank on an agent.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let mut op = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        let st = op.status(Some(job)).await.unwrap();
        assert_eq!((st[0].round, st[0].world, st[0].restarts), (1, 7, 0));
        assert!(
            st[0].members.iter().all(|m| m.last_seen_ms < 2_000),
            "ranks counted alive from their agents: {:?}",
            st[0].members
        );

        // Node b's agent hangs: both its ranks are lost in one round end.
        b.go_silent();
        let mut rest: Vec<&mut NativeClient> = ra
            .iter_mut()
            .chain(rc.iter_mut())
            .chain(std::iter::once(&mut solo))
            .collect();
        let ws = welcomes(&mut rest).await;
        assert!(ws.iter().all(|w| (w.round, w.world) == (2, 5)), "{ws:?}");
        let why = lost_why(&ws[0]);
        assert!(why.contains("its node agent sent nothing"), "{why}");
        assert!(why.contains("\"b-0\"") && why.contains("\"b-1\""), "{why}");

        // Node c's connection closes: both its ranks, in one round end.
        cc.close("node c's agent stopped");
        let mut rest: Vec<&mut NativeClient> =
            ra.iter_mut().chain(std::iter::once(&mut solo)).collect();
        let ws = welcomes(&mut rest).await;
        assert!(ws.iter().all(|w| (w.round, w.world) == (3, 3)), "{ws:?}");
        let why = lost_why(&ws[0]);
        assert!(why.contains("connection closed"), "{why}");
        assert!(why.contains("\"c-0\"") && why.contains("\"c-1\""), "{why}");
        for r in rc.iter_mut() {
            assert!(
                r.wait_welcome(WAIT).await.is_err(),
                "c's ranks hear the end"
            );
        }

        // Node a's agent reports one rank gone: only it.
        a.rank_lost("a-1", "process 4242 exited with status 1")
            .unwrap();
        let mut rest: Vec<&mut NativeClient> = ra[..1]
            .iter_mut()
            .chain(std::iter::once(&mut solo))
            .collect();
        let ws = welcomes(&mut rest).await;
        assert!(ws.iter().all(|w| (w.round, w.world) == (4, 2)), "{ws:?}");
        assert!(
            matches!(&ws[0].cause, RoundCause::MemberLost { member, why, .. }
                if member == "a-1" && why.contains("reports it gone: process 4242")),
            "{:?}",
            ws[0].cause
        );
        assert!(a.is_alive().is_ok(), "the agent stays");

        // A rank's stream closes: only it; the agent and the node's connection stay.
        let a0 = ra.remove(0);
        a0.close("rank a-0 done").await;
        let w = solo.wait_welcome(WAIT).await.unwrap();
        assert_eq!((w.round, w.world), (5, 1));
        assert!(
            matches!(&w.cause, RoundCause::MemberLost { member, .. } if member == "a-0"),
            "{:?}",
            w.cause
        );
        assert!(a.is_alive().is_ok());
        let (code, metrics) = common::http_get(&s.http_endpoint().unwrap(), "/metrics", None);
        assert_eq!(code, 200);
        assert!(metrics.contains("dtrdzv_nodes_lost_total 2"), "{metrics}");
        assert!(metrics.contains("dtrdzv_node_agents_total 3"), "{metrics}");
    });
}

#[test]
fn what_an_agent_may_not_do_is_refused_with_the_reason() {
    let s = server_with_token(TOKEN);
    rt().block_on(async {
        let spec = JobSpec::elastic(1, 4);
        let c = Connector::new(&cfg(&s, TOKEN).trust).unwrap();
        match c.node_agent(&cfg(&s, "guess"), "j", "a").await {
            Err(NativeError::Refused {
                code: RefusalCode::BadToken,
                ..
            }) => {}
            other => panic!("a wrong token was not refused: {other:?}"),
        }
        let agent = c.node_agent(&cfg(&s, TOKEN), "j", "a").await.unwrap();
        let mut r = agent.rank().await.unwrap();
        match r.join(who("j", "x", "another-node", &spec)).await {
            Err(NativeError::Refused {
                code: RefusalCode::BadRequest,
                message,
            }) => assert!(
                message.contains("but names node \"another-node\""),
                "{message}"
            ),
            other => panic!("a rank of another node was not refused: {other:?}"),
        }
        // The agent itself is untouched: its next rank joins.
        let mut r = agent.rank().await.unwrap();
        r.join(who("j", "a-0", "a", &spec)).await.expect("joined");
        assert_eq!(r.wait_welcome(WAIT).await.unwrap().world, 1);
    });
}
