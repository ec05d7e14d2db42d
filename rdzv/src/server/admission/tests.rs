use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

fn later(t: Instant) -> Instant {
    t + GRACE
}

fn admit(a: &mut Admission, from: IpAddr, t: Instant) -> u64 {
    match a.admit(from, t) {
        Decision::Admit { id, .. } => id,
        Decision::Refuse => panic!("refused"),
    }
}

#[test]
fn full_of_silent_connections_evicts_the_oldest_not_the_newest() {
    let t = Instant::now();
    let mut a = Admission::new(4, 4);
    // Two held (proven) and two silent within their grace: fewer than half the door is
    // new, so nobody is evicted: the newest is refused.
    for _ in 0..2 {
        let id = admit(&mut a, ip(1), t);
        a.prove(id, false, t);
    }
    let silent: Vec<u64> = (0..2).map(|_| admit(&mut a, ip(1), t)).collect();
    assert_eq!(a.admit(ip(2), t), Decision::Refuse);
    assert_eq!(
        a.admit(ip(2), later(t)),
        Decision::Admit {
            id: 5,
            evict: Some(silent[0])
        }
    );
    assert_eq!(a.len(), 4);
    let Decision::Admit { evict, .. } = a.admit(ip(3), later(t)) else {
        panic!()
    };
    assert_eq!(evict, Some(silent[1]));
}

#[test]
fn a_flood_of_new_connections_evicts_the_oldest_even_within_its_grace() {
    let t = Instant::now();
    let mut a = Admission::new(3, 3);
    let ids: Vec<u64> = (0..3).map(|_| admit(&mut a, ip(1), t)).collect();
    // Every slot new: a flood. The oldest goes, within its grace or not.
    assert_eq!(
        a.admit(ip(2), t),
        Decision::Admit {
            id: 4,
            evict: Some(ids[0])
        }
    );
}

#[test]
fn held_connections_are_never_evicted_and_then_the_newest_is_refused() {
    let t = Instant::now();
    let mut a = Admission::new(2, 2);
    for _ in 0..2 {
        let id = admit(&mut a, ip(1), t);
        a.prove(id, false, t);
    }
    assert_eq!(a.admit(ip(2), later(t)), Decision::Refuse);
    a.close(1);
    assert!(matches!(
        a.admit(ip(2), later(t)),
        Decision::Admit { evict: None, .. }
    ));
}

#[test]
fn idle_connections_are_evicted_longest_idle_first_and_busy_ones_never() {
    let t = Instant::now();
    let mut a = Admission::new(4, 4);
    let ids: Vec<u64> = (0..4).map(|_| admit(&mut a, ip(1), t)).collect();
    // One byte each (proven, head never completes): idle from then.
    a.prove(ids[0], true, t + Duration::from_millis(30));
    a.prove(ids[1], true, t + Duration::from_millis(10));
    a.prove(ids[2], true, t + Duration::from_millis(20));
    // One is handling a request.
    a.prove(ids[3], true, t);
    a.busy(ids[3]);
    let at = t + Duration::from_secs(1);
    let Decision::Admit { evict, .. } = a.admit(ip(2), at) else {
        panic!()
    };
    assert_eq!(evict, Some(ids[1]), "idle the longest");
    // A keep-alive connection answered just now is idle from now: the others go first.
    a.idle(ids[3], at);
    let Decision::Admit { evict, .. } = a.admit(ip(2), at) else {
        panic!()
    };
    assert_eq!(evict, Some(ids[2]));
    let Decision::Admit { evict, .. } = a.admit(ip(2), at) else {
        panic!()
    };
    assert_eq!(evict, Some(ids[0]));
    // Four busy: refused.
    let mut b = Admission::new(2, 2);
    for _ in 0..2 {
        let id = admit(&mut b, ip(1), t);
        b.prove(id, true, t);
        b.busy(id);
    }
    assert_eq!(b.admit(ip(2), at), Decision::Refuse);
}

#[test]
fn one_source_holds_at_most_its_share_unproven() {
    let t = Instant::now();
    let mut a = Admission::new(100, 2);
    let first = a.admit(ip(1), t);
    a.admit(ip(1), t);
    // A third silent one from the same source replaces that source's oldest.
    assert_eq!(
        a.admit(ip(1), later(t)),
        Decision::Admit {
            id: 3,
            evict: Some(1)
        }
    );
    assert!(matches!(first, Decision::Admit { id: 1, .. }));
    // Another source is not affected.
    assert!(matches!(
        a.admit(ip(2), later(t)),
        Decision::Admit { evict: None, .. }
    ));
    // A burst from one source (every rank of a node connecting at once) is admitted while
    // the door has room, share or not.
    let mut b = Admission::new(100, 2);
    for _ in 0..10 {
        assert!(matches!(
            b.admit(ip(1), t),
            Decision::Admit { evict: None, .. }
        ));
    }
    assert_eq!(Admission::default_per_source(4096), 512);
    assert_eq!(Admission::default_per_source(16), 8);
}

#[test]
fn one_source_holding_more_than_half_the_door_gives_way_to_another_source() {
    let t = Instant::now();
    let max = 4 * HOG_MIN;
    let mut a = Admission::new(max, max);
    // A host opened 3/4 of the door and proved every connection with one request; a real
    // client's host holds the rest.
    let hog: Vec<u64> = (0..3 * HOG_MIN)
        .map(|_| {
            let id = admit(&mut a, ip(1), t);
            a.prove(id, false, t);
            id
        })
        .collect();
    for _ in 0..HOG_MIN {
        let id = admit(&mut a, ip(2), t);
        a.prove(id, false, t);
    }
    // A third host gets in, at the hog's expense (its newest first), not the real client's.
    assert_eq!(
        a.admit(ip(3), later(t)),
        Decision::Admit {
            id: (max + 1) as u64,
            evict: hog.last().copied()
        }
    );
    // The hog itself cannot evict its own way in, nor push out the others.
    let id = admit(&mut a, ip(3), later(t));
    a.prove(id, false, later(t));
    assert_eq!(a.admit(ip(1), later(t)), Decision::Refuse);
    // Down to half the door, it is left alone: the door is then simply full.
    while a.admit(ip(4), later(t)) != Decision::Refuse {}
    let held_by_hog = a.conns.values().filter(|e| e.source == ip(1)).count();
    assert_eq!(held_by_hog, max / 2);
}
