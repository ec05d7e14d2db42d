//! The server's one memory budget (issue 42, "one memory budget for the whole server"): the
//! TCPStore, etcd v2 and native doors hold their clients' bytes against one
//! `--max-memory-bytes`, three quarters of it for data and a quarter for partly received
//! frames. A real `dt-rdzv serve`, each door's own quota far above the budget: what one door's
//! clients hold is refused to another's, naming the budget, and freed room serves again.

mod adv;
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use adv::*;
use common::rt;

/// An HTTP request with the server token; (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    (status, out)
}

/// `name{labels}`'s value on `/metrics`.
fn metric(s: &Served, series: &str) -> u64 {
    let (_, page) = http(&s.http, "GET", "/metrics", "");
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} not on /metrics:\n{page}"))
}

#[test]
fn the_doors_hold_their_clients_bytes_against_one_budget() {
    // 64 MiB: 48 MiB for data, 16 for partial frames; the doors' own quotas are 1 GiB.
    let budget = 64 * MIB;
    let s = Served::start(
        "memory-budget",
        &[
            "--max-memory-bytes",
            &budget.to_string(),
            "--max-store-bytes",
            "1073741824",
            "--max-namespace-bytes",
            "0",
            "--etcd-v2-port",
            "0",
        ],
    );
    let etcd = s.etcd.clone().unwrap();
    let base = s.rss();
    let mib = vec![7u8; MIB as usize];

    // TCPStore clients fill the data share: a write past it is refused (its connection
    // closed), naming the budget. SET has no reply: each is followed by a CHECK, so that
    // a refusal shows on the write that met it.
    let mut client = TcpStoreClient::connect(&s.store, Duration::from_secs(10)).unwrap();
    for i in 0..64 {
        let key = format!("fill/{i}");
        if client
            .set(&key, &mib)
            .and_then(|()| client.check(&[&key]))
            .is_err()
        {
            client = TcpStoreClient::connect(&s.store, Duration::from_secs(10)).unwrap();
            break;
        }
    }
    let stored = client.num_keys().unwrap() as u64;
    eprintln!("measured: {stored} MiB stored through the TCPStore door");
    assert!((40..48).contains(&stored), "{stored} MiB stored");
    let held = metric(
        &s,
        "dtrdzv_memory_held_bytes{door=\"TCPStore\",kind=\"data\"}",
    );
    assert!(held >= stored * MIB && held < 48 * MIB, "{held}");
    assert_eq!(metric(&s, "dtrdzv_memory_budget_bytes"), budget);

    // The etcd door, far under its own quota, is refused what the server has not got.
    let value = format!("value={}", "v".repeat(1_400_000));
    let (status, body) = http(&etcd, "PUT", "/v2/keys/big", &value);
    assert_ne!(status, 200, "{body}");
    assert!(body.contains("--max-memory-bytes"), "{status} {body}");

    // So is a native member's published configuration.
    rt().block_on(async {
        let mut m = NativeClient::connect(&s.client()).await.unwrap();
        m.join(member("budget", "m0", vec!["127.0.0.1:1".into()]))
            .await
            .unwrap();
        m.wait_welcome(Duration::from_secs(30)).await.unwrap();
        m.publish("big", vec![1; 1 << 20]).unwrap();
        loop {
            match m.next_message(Duration::from_secs(10)).await.unwrap() {
                ServerMsg::Refused { message, .. } => {
                    assert!(message.contains("--max-memory-bytes"), "{message}");
                    break;
                }
                ServerMsg::Config { .. } => panic!("1 MiB published past the budget"),
                _ => {}
            }
        }
    });

    // The TCPStore's clients let go: the other doors are served again.
    for i in 0..16 {
        assert!(client.delete_key(&format!("fill/{i}")).unwrap());
    }
    let (status, body) = http(&etcd, "PUT", "/v2/keys/big", &value);
    assert!(status == 200 || status == 201, "{status} {body}");
    let etcd_held = metric(
        &s,
        "dtrdzv_memory_held_bytes{door=\"etcd v2\",kind=\"data\"}",
    );
    assert!(etcd_held >= 1_400_000, "{etcd_held}");

    let peak = s.rss();
    eprintln!(
        "measured: RSS {} MiB (base {} MiB, budget {} MiB)",
        peak / MIB,
        base / MIB,
        budget / MIB
    );
    assert!(
        peak < BASELINE_RSS.max(base) + budget,
        "RSS {} MiB",
        peak / MIB
    );
    let log = s.log();
    assert!(log.contains("server memory (--max-memory-bytes)"), "{log}");
}

/// Strangers' partly received frames have the budget's quarter to themselves, three eighths of
/// it for the native door: native members each starting a 1.9 MiB frame fill 3 MiB of a 32 MiB
/// budget and no more (the door's own bound, 256 MiB, is far above), and a TCPStore client
/// beside them still writes (its 1 MiB frames in the TCPStore door's three eighths).
#[test]
fn partial_frames_have_a_quarter_of_the_budget_and_take_nothing_from_writes() {
    let s = Served::start("memory-frames", &["--max-memory-bytes", "33554432"]);
    let store = StoreBystander::start(&s.store);
    rt().block_on(async {
        let ep = raw_endpoint(&s.fingerprint);
        let (open, _members) = partial_frames(&ep, &s, "frames", 8).await;
        eprintln!("measured: {open} of 8 partial frames of 1.9 MiB held in 3 MiB");
        assert!((1..=2).contains(&open), "{open} of 8 held");
        let frames = metric(
            &s,
            "dtrdzv_memory_held_bytes{door=\"native\",kind=\"frames\"}",
        );
        assert!(frames <= 3 * MIB, "{frames}");
        // The data's three quarters are all there: 16 MiB more through the TCPStore.
        let client = TcpStoreClient::connect(&s.store, Duration::from_secs(10)).unwrap();
        for i in 0..16 {
            client
                .set(&format!("w/{i}"), &vec![1u8; MIB as usize])
                .unwrap();
        }
        assert_eq!(client.num_keys().unwrap() as u64 - 16, 16);
    });
    store.finish();
    let log = s.log();
    assert!(
        log.contains("budget for partly received frames is spent"),
        "{log}"
    );
}

/// etcd request bodies are read piece by piece and charged to the etcd door's share of the
/// partial frames' quarter (a quarter of it: 2 MiB of a 32 MiB budget): 48 clients each
/// sending 1 MiB of a 1.5 MiB body and then nothing are refused once the share is spent (503,
/// naming the budget, where they used to be buffered whole whatever their number), the
/// server's RSS stays under the budget, and small requests, whose first 16 KiB are not charged, are
/// served beside them.
#[test]
fn etcd_bodies_still_arriving_are_charged_and_small_requests_still_served() {
    let budget = 32 * MIB;
    let s = Served::start(
        "memory-etcd-bodies",
        &[
            "--max-memory-bytes",
            &budget.to_string(),
            "--etcd-v2-port",
            "0",
        ],
    );
    let etcd = s.etcd.clone().unwrap();
    let base = s.rss();
    let piece = vec![b'v'; MIB as usize];
    let mut held = Vec::new();
    for i in 0..48 {
        let mut c = TcpStream::connect(&etcd).unwrap();
        let head = format!(
            "PUT /v2/keys/slow/{i} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1500006\r\n\r\n\
             value="
        );
        c.write_all(head.as_bytes()).unwrap();
        // A refused body's connection may close while the rest is still being written.
        let _ = c.write_all(&piece);
        held.push(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    let frames = metric(
        &s,
        "dtrdzv_memory_held_bytes{door=\"etcd v2\",kind=\"frames\"}",
    );
    assert!(frames <= 2 * MIB, "{frames}");
    let mut refused = 0;
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut answer = [0u8; 4096];
        if let Ok(n @ 1..) = c.read(&mut answer) {
            let text = String::from_utf8_lossy(&answer[..n]);
            assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            assert!(text.contains("--max-memory-bytes"), "{text}");
            refused += 1;
        }
    }
    eprintln!("measured: {refused} of 48 bodies refused, {frames} bytes of bodies held");
    assert!(refused >= 40, "{refused} of 48 refused");

    let (status, body) = http(&etcd, "PUT", "/v2/keys/small", "value=ok");
    assert_eq!(status, 201, "{body}");
    let (status, body) = http(&etcd, "GET", "/v2/keys/small", "");
    assert!(status == 200 && body.contains("\"ok\""), "{status} {body}");

    let peak = s.rss();
    eprintln!("measured: RSS {} MiB (base {} MiB)", peak / MIB, base / MIB);
    assert!(
        peak < BASELINE_RSS.max(base) + budget,
        "RSS {} MiB",
        peak / MIB
    );
    drop(held);
    let log = s.log();
    assert!(log.contains("etcd v2 request body refused"), "{log}");
}
