//! A member whose QUIC connection is lost on its side only, against a real server: as when its
//! process is starved past its idle timeout, the server still holds the connection (it heard
//! the member's heartbeats until then) when the member reconnects and asks for its place. The
//! server refuses that rejoin (`MemberTaken`) and closes the new connection until its
//! heartbeat timeout lets go of the old one; the member must try again rather than end its
//! session, and be welcomed into the next round with the other member.
//!
//! A UDP relay between the member and the server makes the one-sided loss: it stops passing
//! what the server sends on the member's connection (what the member sends still arrives), and
//! relays each new connection the member opens through a socket of its own.

mod common;
use common::{WAIT, rt};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dt_rdzv::native::{Membership, NativeClient, NativeError};
use dt_rdzv_proto::native::{JobSpec, Role, RoundCause};
use tokio::net::UdpSocket;

const TOKEN: &str = "stall-token";

/// One connection's way to the server: its own socket (the server sees another address), and
/// whether what comes back is dropped.
struct Upstream {
    socket: Arc<UdpSocket>,
    muted: AtomicBool,
    /// The member sent a short-header (1-RTT) packet on it: the handshake is done, so a later
    /// Initial is a new connection's.
    established: AtomicBool,
}

/// The relay: the member talks to `addr`; `mute` cuts the current connection's way back.
struct Relay {
    addr: SocketAddr,
    current: Arc<std::sync::Mutex<Option<Arc<Upstream>>>>,
    /// How many connections the member opened through it.
    opened: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(server: SocketAddr) -> Self {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = front.local_addr().unwrap();
        let current: Arc<std::sync::Mutex<Option<Arc<Upstream>>>> = Default::default();
        let opened = Arc::new(AtomicUsize::new(0));
        let (cur, count) = (current.clone(), opened.clone());
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            loop {
                let Ok((n, member)) = front.recv_from(&mut buf).await else {
                    return;
                };
                let packet = &buf[..n];
                // A long header with packet type 0: an Initial.
                let initial = packet[0] & 0x80 != 0 && (packet[0] & 0x30) == 0;
                let up = {
                    let mut cur = cur.lock().unwrap();
                    let stale = cur.as_ref().is_none_or(|u| {
                        u.muted.load(Ordering::Relaxed) || u.established.load(Ordering::Relaxed)
                    });
                    if initial && stale {
                        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                        socket.connect(server).unwrap();
                        socket.set_nonblocking(true).unwrap();
                        let up = Arc::new(Upstream {
                            socket: Arc::new(UdpSocket::from_std(socket).unwrap()),
                            muted: AtomicBool::new(false),
                            established: AtomicBool::new(false),
                        });
                        count.fetch_add(1, Ordering::Relaxed);
                        let (back, front) = (up.clone(), front.clone());
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n) = back.socket.recv(&mut buf).await {
                                if !back.muted.load(Ordering::Relaxed) {
                                    let _ = front.send_to(&buf[..n], member).await;
                                }
                            }
                        });
                        *cur = Some(up);
                    }
                    cur.clone()
                };
                if let Some(up) = up {
                    if packet[0] & 0x80 == 0 {
                        up.established.store(true, Ordering::Relaxed);
                    }
                    let _ = up.socket.send(packet).await;
                }
            }
        });
        Self {
            addr,
            current,
            opened,
            task,
        }
    }

    /// Drops what the server sends on the member's current connection from now on (or, with
    /// `false`, passes it again).
    fn mute(&self, muted: bool) {
        if let Some(up) = self.current.lock().unwrap().as_ref() {
            up.muted.store(muted, Ordering::Relaxed);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn who(job: &str, i: usize) -> Membership {
    Membership {
        job: job.into(),
        member: format!("m{i}"),
        node: format!("host{i}"),
        addrs: vec![format!("127.0.0.1:{}", 41000 + i)],
        host: Vec::new(),
        role: Role::Worker,
        spec: JobSpec::fixed(2),
    }
}

#[test]
fn a_member_whose_connection_died_on_its_side_only_rejoins_once_the_server_lets_go() {
    let s = common::server_with_token(TOKEN);
    let direct = common::client_cfg(&s, TOKEN);
    rt().block_on(async {
        let relay = Relay::start(direct.endpoint.parse().unwrap()).await;
        let mut through = direct.clone();
        through.endpoint = relay.addr.to_string();
        let mut m0 = NativeClient::connect(&through).await.expect("connect");
        m0.join(who("stall", 0)).await.expect("join");
        let mut m1 = NativeClient::connect(&direct).await.expect("connect");
        m1.join(who("stall", 1)).await.expect("join");
        for m in [&mut m0, &mut m1] {
            assert_eq!(m.wait_welcome(WAIT).await.expect("welcome").round, 1);
        }
        assert_eq!(relay.opened.load(Ordering::Relaxed), 1);
        // From now on m0 hears nothing from the server, which still hears m0's heartbeats:
        // m0's connection times out on its side (its idle timeout) while the server holds it.
        let cut = Instant::now();
        relay.mute(true);
        let w = loop {
            match m0.wait_welcome(WAIT).await {
                Ok(w) if w.round >= 2 => break w,
                Ok(_) => {}
                Err(NativeError::Lost(why)) => {
                    panic!("the member ended its session instead of trying again: {why}")
                }
                Err(e) => panic!("{e}"),
            }
        };
        let back = cut.elapsed();
        assert!(
            matches!(w.cause, RoundCause::MemberLost { .. }),
            "the server let go of the old connection at its heartbeat timeout: {:?}",
            w.cause
        );
        // Its rejoin was refused at least once (a connection for it, and one that was taken).
        let opened = relay.opened.load(Ordering::Relaxed);
        assert!(opened >= 3, "{opened} connections through the relay");
        let w1 = m1.wait_welcome(WAIT).await.expect("m1 welcomed again");
        assert_eq!((w1.round, w1.world), (w.round, 2));
        assert!(back < Duration::from_secs(30), "{back:?}");
        let status = m1.status(Some("stall")).await.expect("status");
        assert_eq!(status[0].members.len(), 2);
    });
}
