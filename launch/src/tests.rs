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
fn every_rank_knows_when_rank_0_hosts_the_store() {
    let base = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];
    let l = run(&Explicit::default(), &base).unwrap();
    assert!(l.rank0_hosts.value && !l.host_store.value, "{l:?}");
    assert_eq!(
        hosted::Role::of(l.host_store.value, l.rank0_hosts.value),
        hosted::Role::Guest
    );
    let mut zero = base.to_vec();
    zero[0] = ("RANK", "0");
    let l = run(&Explicit::default(), &zero).unwrap();
    assert_eq!(
        hosted::Role::of(l.host_store.value, l.rank0_hosts.value),
        hosted::Role::Host
    );
    // torchrun's agent store, an explicit choice, or a dt-rdzv: the store outlives inits.
    for extra in [
        ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ("DTCOMM_RDZV_HOST", "1"),
    ] {
        let mut v = base.to_vec();
        v.push(extra);
        assert!(!run(&Explicit::default(), &v).unwrap().rank0_hosts.value);
    }
    let ep = run(
        &Explicit::default(),
        &[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("DTCOMM_RDZV_ENDPOINT", "rdzv:29400"),
        ],
    )
    .unwrap();
    assert!(!ep.rank0_hosts.value);
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
    // A world past the cap is refused here, not by an allocation failure in init().
    let e = run(
        &Explicit::default(),
        &[("RANK", "0"), ("WORLD_SIZE", "2147483647")],
    )
    .unwrap_err();
    assert!(
        e.contains("a world of 2147483647 ranks (from WORLD_SIZE) is more than dtcomm takes"),
        "{e}"
    );
    let e = run(
        &Explicit::default(),
        &[
            ("OCI__MODE", "MAIN"),
            ("OCI__WORKER_COUNT", &usize::MAX.to_string()),
        ],
    )
    .unwrap_err();
    assert!(e.contains("OCI__WORKER_COUNT + 1"), "{e}");
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

/// What `srun -N 3 -n 7` gives task 4 (second node, two tasks per node then one).
fn srun_task(procid: &str, localid: &str, nodeid: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SLURM_PROCID", procid.into()),
        ("SLURM_LOCALID", localid.into()),
        ("SLURM_NODEID", nodeid.into()),
        ("SLURM_NTASKS", "7".into()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_JOB_ID", "4242".into()),
        ("SLURM_STEP_NODELIST", "gpu-a[07-08],cpu1".into()),
        ("SLURM_STEP_TASKS_PER_NODE", "3(x2),1".into()),
    ]
}

fn run_owned(ex: &Explicit, vars: &[(&'static str, String)]) -> Result<Launch, String> {
    let v: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run(ex, &v)
}

#[test]
fn an_srun_task_gets_its_rank_world_local_rank_and_rank_0s_store() {
    let l = run_owned(&Explicit::default(), &srun_task("4", "1", "1")).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(4), 7));
    assert_eq!(
        (l.rank.source.as_str(), l.world.source.as_str()),
        ("SLURM_PROCID", "SLURM_NTASKS")
    );
    assert_eq!((l.local_rank.value, l.local_size.value), (1, 3));
    let port = slurm::port_for(4242, 0);
    assert_eq!(l.endpoint.value, Some(format!("gpu-a07:{port}")));
    assert!(!l.host_store.value);
    assert_eq!(l.run_id.value, "slurm-4242.0");
    let zero = run_owned(&Explicit::default(), &srun_task("0", "0", "0")).unwrap();
    assert!(zero.host_store.value, "{}", zero.host_store.source);
    // torchrun under srun (one task per node) keeps torchrun's ranks and rendezvous.
    let mut t = srun_task("1", "0", "1");
    t.extend([
        ("RANK", "5".into()),
        ("WORLD_SIZE", "8".into()),
        ("MASTER_ADDR", "gpu-a07".into()),
        ("MASTER_PORT", "29500".into()),
    ]);
    let l = run_owned(&Explicit::default(), &t).unwrap();
    assert_eq!(
        (l.rank.value, l.world.value, l.rank.source.as_str()),
        (Some(5), 8, "RANK")
    );
    assert_eq!(l.endpoint.value.as_deref(), Some("gpu-a07:29500"));
    // srun --mpi=pmi2: PMI-1 ranks, Slurm's local rank (PMI-1 has none).
    let mut p = srun_task("4", "1", "1");
    p.extend([
        ("PMI_RANK", "4".into()),
        ("PMI_SIZE", "7".into()),
        ("PMI_FD", "6".into()),
    ]);
    let l = run_owned(&Explicit::default(), &p).unwrap();
    assert_eq!((l.local_rank.value, l.local_size.value), (1, 3));
    assert_eq!(l.local_rank.source, "SLURM_LOCALID");
    // srun --mpi=pmix: Slurm's ranks, rank 0's address through Slurm's PMIx server.
    let mut x = srun_task("4", "1", "1");
    x.push(("PMIX_NAMESPACE", "slurm.pmix.4242.0".into()));
    let l = run_owned(&Explicit::default(), &x).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(4), 7));
    assert_eq!(
        l.endpoint.value.as_deref(),
        Some("mpi-pmix://slurm.pmix.4242.0")
    );
    assert_eq!(l.endpoint.source, "Slurm's PMIx server (srun --mpi=pmix)");
}

#[test]
fn slurm_variables_that_disagree_are_refused_naming_them() {
    let with = |k: &'static str, v: &str| {
        let mut t = srun_task("4", "1", "1");
        t.retain(|(n, _)| *n != k);
        t.push((k, v.into()));
        run_owned(&Explicit::default(), &t).unwrap_err()
    };
    assert!(with("SLURM_PROCID", "7").contains("SLURM_PROCID=7 is not below SLURM_NTASKS=7"));
    let e = with("SLURM_STEP_TASKS_PER_NODE", "3(x2)");
    assert!(e.contains("counts 6 tasks but SLURM_NTASKS=7"), "{e}");
    let e = with("SLURM_STEP_NODELIST", "gpu-a[07-08");
    assert!(
        e.contains("SLURM_STEP_NODELIST") && e.contains("'[' without ']'"),
        "{e}"
    );
    let e = with("SLURM_STEP_NODELIST", "gpu-a[07-09],cpu1");
    assert!(e.contains("names 4 hosts"), "{e}");
    assert!(with("SLURM_LOCALID", "3").contains("SLURM_LOCALID=3 is not below"));
    assert!(with("SLURM_NTASKS", "x").contains("SLURM_NTASKS=\"x\""));
}

#[test]
fn slurm_host_lists_and_task_counts_expand() {
    let h = slurm::expand_hostlist("node[01-03,07],gpu-a[1-2],login").unwrap();
    assert_eq!(
        h,
        [
            "node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2", "login"
        ]
    );
    let h = slurm::expand_hostlist("r[1-2]-n[8-9]").unwrap();
    assert_eq!(h, ["r1-n8", "r1-n9", "r2-n8", "r2-n9"]);
    assert!(slurm::expand_hostlist("n[3-1]").is_err());
    assert!(slurm::expand_hostlist("n[a-b]").is_err());
    assert!(slurm::expand_hostlist("n]1[").is_err());
    // Host-list bombs are refused by counting, before anything is built (they once took
    // 4.5 GB or an abort after 15-23 s).
    for bomb in [
        "a[0-999][0-999][0-999]",
        "x[0-1048575],y[0-1048575]",
        "n[0-600000,0-600000]",
        &"h[0-99999],".repeat(20),
    ] {
        let e = slurm::expand_hostlist(bomb).unwrap_err();
        assert!(e.contains("more than 1048576 hosts"), "{e}");
    }
    assert_eq!(
        slurm::expand_hostlist("n[0-1023]").unwrap().len(),
        1024,
        "a large cluster still expands"
    );
    assert_eq!(slurm::tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
    assert!(slurm::tasks_per_node("2(x3").is_err());
    // Counted, not expanded, past a million nodes; sums that would wrap do not match a world.
    let many = ["1(x1048576)"; 3].join(",");
    let e = slurm::tasks_per_node(&many).unwrap_err();
    assert!(e.contains("more than 1048576 nodes"), "{e}");
    let mut task = srun_task("4", "1", "1");
    task[7].1 = format!("{},{},9", usize::MAX, usize::MAX);
    let e = run_owned(&Explicit::default(), &task).unwrap_err();
    assert!(e.contains("but SLURM_NTASKS=7"), "{e}");
    assert_ne!(slurm::port_for(4242, 0), slurm::port_for(4242, 1));
    assert!((15_000..25_000).contains(&slurm::port_for(u64::MAX, 3)));
}

#[test]
fn a_batch_script_alone_is_not_an_srun_task() {
    let l = run(
        &Explicit::default(),
        &[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "9"),
        ],
    )
    .unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(0), 1));
}

#[test]
fn native_servers_in_fail_over_order_stay_a_list() {
    let l = run(
        &Explicit::default(),
        &[(
            "DTCOMM_RDZV_ENDPOINT",
            "10.0.0.1:29401, [fd00::2]:29401,host3",
        )],
    )
    .unwrap();
    assert!(l.native.value);
    assert_eq!(
        l.endpoint.value.as_deref(),
        Some("10.0.0.1:29401,[fd00::2]:29401,host3:29401")
    );
}

#[test]
fn horovodruns_key_value_server_is_the_rendezvous_under_horovodrun() {
    let l = run(
        &Explicit::default(),
        &[
            ("HOROVOD_RANK", "1"),
            ("HOROVOD_SIZE", "2"),
            ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.1.2.3"),
            ("HOROVOD_GLOO_RENDEZVOUS_PORT", "4711"),
        ],
    )
    .unwrap();
    assert_eq!(
        l.endpoint.value.as_deref(),
        Some("horovod-kv://10.1.2.3:4711")
    );
}

#[test]
fn an_indexed_jobs_pod_takes_its_rank_from_the_completion_index() {
    let base = [
        ("JOB_COMPLETION_INDEX", "2"),
        ("DTCOMM_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "job-0.job"),
        ("MASTER_PORT", "29500"),
    ];
    let l = run(&Explicit::default(), &base).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(2), 4));
    assert_eq!(
        (l.rank.source.as_str(), l.world.source.as_str()),
        ("JOB_COMPLETION_INDEX", "DTCOMM_WORLD_SIZE")
    );
    assert_eq!(l.endpoint.value.as_deref(), Some("job-0.job:29500"));
    // Past the completions: refused, naming both.
    let e = run(
        &Explicit::default(),
        &[("JOB_COMPLETION_INDEX", "4"), ("WORLD_SIZE", "4")],
    )
    .unwrap_err();
    assert!(
        e.contains("JOB_COMPLETION_INDEX=4") && e.contains("WORLD_SIZE=4"),
        "{e}"
    );
    // A launcher's rank wins (torchrun in an Indexed Job's pod: its RANK is global).
    let l = run(
        &Explicit::default(),
        &[
            ("JOB_COMPLETION_INDEX", "1"),
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "a"),
            ("MASTER_PORT", "1"),
        ],
    )
    .unwrap();
    assert_eq!((l.rank.value, l.rank.source.as_str()), (Some(5), "RANK"));
    // No world size: the index alone says nothing (a native rendezvous assigns ranks).
    let l = run(
        &Explicit::default(),
        &[
            ("JOB_COMPLETION_INDEX", "1"),
            ("DTCOMM_RDZV_ENDPOINT", "rdzv:29401"),
        ],
    )
    .unwrap();
    assert!(l.native.value, "{l}");
}

#[test]
fn a_pytorchjob_pod_started_without_torchrun_is_its_node_rank() {
    let pod = [
        ("PET_NNODES", "3"),
        ("PET_NPROC_PER_NODE", "1"),
        ("PET_NODE_RANK", "2"),
        ("PET_MASTER_ADDR", "job-master-0"),
        ("PET_MASTER_PORT", "23456"),
    ];
    let l = run(&Explicit::default(), &pod).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(2), 3));
    assert_eq!(
        (l.rank.source.as_str(), l.world.source.as_str()),
        ("PET_NODE_RANK", "PET_NNODES")
    );
    assert_eq!(l.endpoint.value.as_deref(), Some("job-master-0:23456"));
    assert!(!l.host_store.value);
    let mut zero = pod;
    zero[2] = ("PET_NODE_RANK", "0");
    let l = run(&Explicit::default(), &zero).unwrap();
    assert!(l.host_store.value, "{}", l.host_store.source);
    // c10d's endpoint (default port 29400) and the Indexed Job's index as the node rank.
    let l = run(
        &Explicit::default(),
        &[
            ("PET_NNODES", "2:2"),
            ("PET_RDZV_ENDPOINT", "job-svc"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("JOB_COMPLETION_INDEX", "1"),
        ],
    )
    .unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(1), 2));
    assert_eq!(l.rank.source, "JOB_COMPLETION_INDEX");
    assert_eq!(
        (l.endpoint.value.as_deref(), l.endpoint.source.as_str()),
        (Some("job-svc:29400"), "PET_RDZV_ENDPOINT")
    );
    // torchrun's workers inside such a pod keep torchrun's ranks.
    let mut worker = pod.to_vec();
    worker.extend([
        ("PET_NPROC_PER_NODE", "4"),
        ("RANK", "9"),
        ("WORLD_SIZE", "12"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ]);
    worker.retain(|(k, v)| *k != "PET_NPROC_PER_NODE" || *v == "4");
    let l = run(&Explicit::default(), &worker).unwrap();
    assert_eq!((l.rank.value, l.world.value), (Some(9), 12));
}

#[test]
fn a_pytorchjob_pod_that_cannot_be_one_rank_is_refused_naming_the_variables() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("PET_NNODES", "2"),
                ("PET_NPROC_PER_NODE", "4"),
                ("PET_NODE_RANK", "0"),
            ],
            "PET_NPROC_PER_NODE='4' asks for 4 processes per pod",
        ),
        (
            &[("PET_NNODES", "1:4"), ("PET_NODE_RANK", "0")],
            "PET_NNODES='1:4' is an elastic range",
        ),
        (
            &[("PET_NNODES", "2"), ("PET_NODE_RANK", "2")],
            "PET_NODE_RANK=2 is not below PET_NNODES=2",
        ),
        (
            &[
                ("PET_NNODES", "2"),
                ("PET_NODE_RANK", "1"),
                ("JOB_COMPLETION_INDEX", "0"),
            ],
            "PET_NODE_RANK='1' and JOB_COMPLETION_INDEX='0' disagree",
        ),
        (&[("PET_NNODES", "2")], "PET_NNODES=2 with no PET_NODE_RANK"),
        (
            &[
                ("PET_NNODES", "2"),
                ("PET_NODE_RANK", "1"),
                ("PET_RDZV_BACKEND", "etcd-v2"),
            ],
            "PET_RDZV_BACKEND='etcd-v2'",
        ),
        (
            &[
                ("PET_NNODES", "2"),
                ("PET_NODE_RANK", "1"),
                ("PET_MASTER_ADDR", "m"),
            ],
            "PET_MASTER_ADDR='m' is set but PET_MASTER_PORT is not",
        ),
        (
            &[("PET_NNODES", "2"), ("PET_NODE_RANK", "1")],
            "a world of 2 (PET_NNODES) needs a rendezvous endpoint",
        ),
        // RANK and WORLD_SIZE in a pod of four processes that nobody started.
        (
            &[
                ("PET_NNODES", "2"),
                ("PET_NPROC_PER_NODE", "4"),
                ("RANK", "1"),
                ("WORLD_SIZE", "8"),
                ("MASTER_ADDR", "m"),
                ("MASTER_PORT", "1"),
            ],
            "RANK=1, WORLD_SIZE=8 with PET_NPROC_PER_NODE='4' and no LOCAL_RANK",
        ),
    ];
    for (vars, needle) in cases {
        let e = run(&Explicit::default(), vars).unwrap_err();
        assert!(e.contains(needle), "{vars:?}: {e}");
    }
}
