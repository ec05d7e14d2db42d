//! The `*_perf` binaries' `--device` form: device buffers through the engine's device path,
//! on dtcomm's in-memory GPU twin (NCCL's twin at world 1, host staging across processes),
//! results checked; and `--device cuda` where there is no CUDA names why instead of running.

use std::process::Command;

fn run(exe: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(exe)
        .args(args)
        .args(["--timeout", "120"])
        .env_remove("DTCOMM_CUDA")
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn device_buffers_on_the_twin_give_checked_results() {
    let cases = [
        (env!("CARGO_BIN_EXE_all_reduce_perf"), "1"),
        (env!("CARGO_BIN_EXE_all_reduce_perf"), "3"),
        (env!("CARGO_BIN_EXE_alltoall_perf"), "1"),
        (env!("CARGO_BIN_EXE_alltoall_perf"), "2"),
        (env!("CARGO_BIN_EXE_reduce_perf"), "2"),
    ];
    for (exe, world) in cases {
        let (ok, out, err) = run(
            exe,
            &[
                "--device", "twin", "--world", world, "-b", "1K", "-e", "64K", "-f", "64", "-n",
                "2", "-w", "1", "-r", "1",
            ],
        );
        assert!(ok, "{exe} world {world}:\n{out}\n{err}");
        assert!(out.contains("in-memory GPU twin"), "{out}");
        assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
        // Two sizes, both columns checked.
        let rows = out.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(rows, 2, "{out}");
        let nccl = if world == "1" {
            "in-memory NCCL twin"
        } else {
            "no NCCL (the NCCL twin needs its ranks in one process)"
        };
        assert!(out.contains(nccl), "{out}");
    }
}

#[test]
fn device_cuda_without_cuda_says_why() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has a GPU (scripts/test_gpu.sh measures it)");
        return;
    }
    let (ok, out, err) = run(
        env!("CARGO_BIN_EXE_all_reduce_perf"),
        &["--device", "cuda", "--world", "1", "-b", "1K", "-e", "1K"],
    );
    assert!(!ok, "{out}");
    assert!(
        err.contains("rank 0: --device cuda: no CUDA here: "),
        "{err}"
    );
}

#[test]
fn point_to_point_has_no_device_form() {
    let (ok, _, err) = run(
        env!("CARGO_BIN_EXE_sendrecv_perf"),
        &["--device", "twin", "--world", "2", "-b", "1K", "-e", "1K"],
    );
    assert!(!ok);
    assert!(err.contains("sendrecv_perf has no --device form"), "{err}");
}
