use std::collections::HashMap;

use super::*;

fn run(ex: &Explicit, vars: &[(&str, &str)]) -> Result<Launch, String> {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve(ex, &|k| env.get(k).cloned())
}

#[test]
fn nothing_set_is_rank_0_of_1_with_no_endpoint() {
    let l = run(&Explicit::default(), &[]).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(0), 1));
    assert_eq!(l.endpoint.value, None);
    assert_eq!(l.run_id.value, "dtcomm");
    assert!(!l.host_store.value && !l.native.value);
}

#[test]
fn dtcomm_variables_win_over_torchrun_and_mpi() {
    let l = run(
        &Explicit::default(),
        &[
            ("DTCOMM_RANK", "2"),
            ("DTCOMM_WORLD_SIZE", "4"),
            ("RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("DTCOMM_RDZV_ENDPOINT", "rdzv"),
            ("TORCHELASTIC_RUN_ID", "job7"),
        ],
    )
    .unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(2), 4));
    assert_eq!(l.rank.source, "DTCOMM_RANK");
    assert_eq!(l.endpoint.value.as_deref(), Some("rdzv:29400"));
    assert_eq!(l.run_id.value, "job7");
    assert_eq!(l.run_id.source, "TORCHELASTIC_RUN_ID");
}

#[test]
fn torchrun_env_makes_rank_0_host_the_store_as_torch_does() {
    let base = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "0"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "::1"),
        ("MASTER_PORT", "29500"),
    ];
    let l = run(&Explicit::default(), &base).unwrap();
    assert_eq!(l.endpoint.value.as_deref(), Some("[::1]:29500"));
    assert!(l.host_store.value, "{}", l.host_store.source);
    assert_eq!(l.local_size.value, 2);
    let mut agent = base.to_vec();
    agent.push(("TORCHELASTIC_USE_AGENT_STORE", "True"));
    assert!(!run(&Explicit::default(), &agent).unwrap().host_store.value);
    let mut rank1 = base.to_vec();
    rank1[0] = ("RANK", "1");
    assert!(!run(&Explicit::default(), &rank1).unwrap().host_store.value);
}

#[test]
fn half_set_pairs_and_bad_numbers_name_the_variables() {
    let e = run(&Explicit::default(), &[("RANK", "1")]).unwrap_err();
    assert!(e.contains("RANK") && e.contains("WORLD_SIZE"), "{e}");
    let e = run(&Explicit::default(), &[("MASTER_ADDR", "h")]).unwrap_err();
    assert!(e.contains("MASTER_PORT"), "{e}");
    let e = run(
        &Explicit::default(),
        &[("PMI_RANK", "x"), ("PMI_SIZE", "2")],
    )
    .unwrap_err();
    assert!(e.contains("PMI_RANK='x' is not an integer"), "{e}");
    let e = run(&Explicit::default(), &[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err();
    assert!(e.contains("not below"), "{e}");
    let e = run(&Explicit::default(), &[("RANK", "0"), ("WORLD_SIZE", "2")]).unwrap_err();
    assert!(e.contains("needs a rendezvous endpoint"), "{e}");
}

#[test]
fn the_native_port_asks_for_the_native_rendezvous_unless_a_launcher_set_ranks() {
    let l = run(
        &Explicit::default(),
        &[("DTCOMM_RDZV_ENDPOINT", "rdzv:29401")],
    )
    .unwrap();
    assert!(l.native.value);
    assert_eq!(l.rank.value, None);
    let l = run(
        &Explicit::default(),
        &[
            ("DTCOMM_RDZV_ENDPOINT", "rdzv:29401"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ],
    )
    .unwrap();
    assert!(!l.native.value, "{}", l.native.source);
    let e = run(
        &Explicit::default(),
        &[
            ("DTCOMM_RDZV_ENDPOINT", "h:1"),
            ("DTCOMM_RDZV_BACKEND", "zk"),
        ],
    )
    .unwrap_err();
    assert!(e.contains("DTCOMM_RDZV_BACKEND"), "{e}");
}

#[test]
fn oci_main_hosts_and_workers_are_numbered_on_arrival() {
    let m = run(
        &Explicit::default(),
        &[("OCI__MODE", "MAIN"), ("OCI__WORKER_COUNT", "3")],
    )
    .unwrap();
    assert_eq!((m.rank.value, m.world.value), (Some(0), 4));
    assert!(m.host_store.value);
    let w = run(
        &Explicit::default(),
        &[
            ("OCI__MODE", "WORKER"),
            ("OCI__WORKER_COUNT", "3"),
            ("DTCOMM_RDZV_ENDPOINT", "main:29400"),
        ],
    )
    .unwrap();
    assert_eq!(w.rank.value, None);
}

#[test]
fn explicit_arguments_win() {
    let l = run(
        &Explicit {
            rank_world: Some((1, 3)),
            endpoint: Some("h:5".into()),
            run_id: Some("r".into()),
        },
        &[("RANK", "0"), ("WORLD_SIZE", "2"), ("DTCOMM_RUN_ID", "x")],
    )
    .unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(1), 3));
    assert_eq!(l.endpoint.value.as_deref(), Some("h:5"));
    assert_eq!(l.run_id.value, "r");
    assert!(l.to_string().contains("rank=1 (explicit)"));
}
