//! The C examples are tests: each is compiled with the system `cc` against the built library
//! and `include/dtcomm.h`, then run at world 2 and 4 through a real `dt-rdzv serve` (started
//! here, stopped by PID), every rank a separate process finding the others through the
//! launcher environment as in `dtcomm.init()`. `cuda_status.c` needs no ranks and runs once.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/`, where cargo put `libdtcomm_ffi.so` and the workspace's binaries.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn compile(example: &str) -> PathBuf {
    let manifest: String =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let dir = Path::new(&manifest);
    // `cargo test` leaves the cdylib in `deps/` (it is copied up to `target/<profile>/` only by
    // a `cargo build` of the library): take the one this build made.
    let top = target_dir();
    let lib = [top.join("deps"), top.clone()]
        .into_iter()
        .find(|d| d.join("libdtcomm_ffi.so").exists())
        .unwrap_or_else(|| panic!("no libdtcomm_ffi.so in {} or its deps/", top.display()));
    // One executable per call: tests compiling the same example run in parallel, and writing
    // over a binary another test is running fails ("text file busy").
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("dtcomm-c-{example}-{}-{n}", std::process::id()));
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(dir.join("include"))
        .arg(dir.join("examples").join(format!("{example}.c")))
        .arg("-L")
        .arg(&lib)
        // An RPATH, not a RUNPATH: cargo's LD_LIBRARY_PATH (which names `target/<profile>/`,
        // where an older copy of the library may sit) must not win over this build's.
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-ldtcomm_ffi", "-o"])
        .arg(&out)
        .status()
        .expect("the system C compiler (cc)");
    assert!(status.success(), "compiling {example}.c failed");
    out
}

/// A `dt-rdzv serve` on a free loopback port (TCPStore door only), stopped on drop.
struct Server {
    child: Child,
    endpoint: String,
}

impl Server {
    /// Starts `dt-rdzv serve --host 127.0.0.1 --port 0 ARGS` with `env`; returns it once the
    /// line starting `dt-rdzv listening KEY=` was printed, with that line's `key=value` words.
    fn spawn(args: &[&str], env: &[(&str, &str)], key: &str) -> (Server, Vec<(String, String)>) {
        let bin = std::env::var_os("DT_RDZV_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| target_dir().join("dt-rdzv"));
        assert!(
            bin.exists(),
            "{} missing: build it first (cargo build -p dt-rdzv)",
            bin.display()
        );
        let mut child = Command::new(bin)
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let prefix = format!("dt-rdzv listening {key}=");
        let line = lines
            .by_ref()
            .take(10)
            .map(Result::unwrap)
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("dt-rdzv printed no {prefix:?} line"));
        let words: Vec<(String, String)> = line
            .split_whitespace()
            .skip(2)
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // Keep reading its stdout: a closed pipe would kill it at its next line.
        std::thread::spawn(move || lines.for_each(drop));
        let endpoint = words
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .expect("the endpoint");
        (Server { child, endpoint }, words)
    }

    /// The TCPStore door only.
    fn start() -> Server {
        Server::spawn(&["--no-native", "--no-http"], &[], "tcpstore").0
    }
}

/// A `dt-rdzv serve` with its native port on loopback (token `token`, 3 s heartbeat
/// timeout): the server (its endpoint the native port) and its certificate's fingerprint.
fn native_server(token: &str) -> (Server, String) {
    let (server, words) = Server::spawn(
        &[
            "--native-port",
            "0",
            "--no-http",
            "--heartbeat-timeout",
            "3s",
        ],
        &[("DTRDZV_TOKEN", token)],
        "native",
    );
    let fingerprint = words
        .into_iter()
        .find(|(k, _)| k == "fingerprint")
        .map(|(_, v)| v)
        .expect("no fingerprint");
    (server, fingerprint)
}

/// Starts `exe` as a member of native job `run_id` (`members` as `DTCOMM_RDZV_MEMBERS`) at
/// `server`, its output piped.
fn native_member(
    exe: &Path,
    server: &Server,
    fingerprint: &str,
    token: &str,
    members: &str,
    run_id: &str,
) -> Child {
    Command::new(exe)
        .env("DTCOMM_RDZV_ENDPOINT", &server.endpoint)
        .env("DTCOMM_RDZV_FINGERPRINT", fingerprint)
        .env("DTCOMM_RDZV_TOKEN", token)
        .env("DTCOMM_RDZV_MEMBERS", members)
        .env("DTCOMM_RDZV_LAST_CALL", "0")
        .env("DTCOMM_RUN_ID", run_id)
        .env("DTCOMM_SOCKET_IFNAME", "lo")
        .env("DTCOMM_TIMEOUT", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `exe` as ranks 0..world; returns each rank's (exit code, stdout, stderr).
fn run_ranks(
    exe: &Path,
    world: usize,
    run_id: &str,
    args: &[&str],
) -> Vec<(Option<i32>, String, String)> {
    let server = Server::start();
    let kids: Vec<Child> = (0..world)
        .map(|r| {
            Command::new(exe)
                .args(args)
                .env("DTCOMM_RANK", r.to_string())
                .env("DTCOMM_WORLD_SIZE", world.to_string())
                .env("DTCOMM_RDZV_ENDPOINT", &server.endpoint)
                .env("DTCOMM_RUN_ID", run_id)
                .env("DTCOMM_SOCKET_IFNAME", "lo")
                .env("DTCOMM_TIMEOUT", "30")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    kids.into_iter()
        .map(|mut k| {
            loop {
                if let Some(st) = k.try_wait().unwrap() {
                    let (mut out, mut err) = (String::new(), String::new());
                    k.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                    k.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                    return (st.code(), out, err);
                }
                if start.elapsed() > Duration::from_secs(120) {
                    let _ = k.kill();
                    let _ = k.wait();
                    panic!("a rank of {} ran past 120 s", exe.display());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .collect()
}

#[test]
fn the_c_allreduce_example_runs_at_world_2_and_4() {
    let exe = compile("allreduce");
    for world in [2, 4] {
        let ranks = run_ranks(&exe, world, &format!("c-allreduce-{world}"), &[]);
        for (r, (code, out, err)) in ranks.iter().enumerate() {
            assert_eq!(*code, Some(0), "rank {r} of {world}:\n{out}\n{err}");
            assert!(
                out.contains(&format!("ALLREDUCE OK rank {r} of {world}")),
                "{out}"
            );
            // The start-up line names each value's source.
            assert!(
                err.contains("rank=") && err.contains("DTCOMM_RANK"),
                "{err}"
            );
        }
    }
}

#[test]
fn the_c_negotiate_example_runs_named_operations_at_world_2_and_3() {
    let exe = compile("negotiate");
    for world in [2, 3] {
        let ranks = run_ranks(&exe, world, &format!("c-negotiate-{world}"), &[]);
        for (r, (code, out, err)) in ranks.iter().enumerate() {
            assert_eq!(*code, Some(0), "rank {r} of {world}:\n{out}\n{err}");
            assert!(
                out.contains(&format!("NEGOTIATE OK rank {r} of {world}")),
                "{out}"
            );
        }
    }
}

#[test]
fn the_c_process_set_example_reduces_on_the_even_ranks_at_world_2_and_3() {
    let exe = compile("process_set");
    for world in [2, 3] {
        let ranks = run_ranks(&exe, world, &format!("c-process-set-{world}"), &[]);
        for (r, (code, out, err)) in ranks.iter().enumerate() {
            assert_eq!(*code, Some(0), "rank {r} of {world}:\n{out}\n{err}");
            assert!(
                out.contains(&format!("PROCESS SET OK rank {r} of {world}")),
                "{out}"
            );
            // Every rank names a rank whose list differs from its own.
            assert!(out.contains("gave ranks ["), "{out}");
        }
    }
}

#[test]
fn the_c_error_example_gets_a_code_and_a_message_for_every_bad_call() {
    let exe = compile("errors");
    for world in [2, 4] {
        let ranks = run_ranks(&exe, world, &format!("c-errors-{world}"), &[]);
        for (r, (code, out, err)) in ranks.iter().enumerate() {
            assert_eq!(*code, Some(0), "rank {r} of {world}:\n{out}\n{err}");
            assert!(out.contains(&format!("ERRORS OK rank {r}")), "{out}");
            let mismatch = out
                .lines()
                .find(|l| l.starts_with("MISMATCH OK"))
                .unwrap_or_else(|| panic!("rank {r}: no mismatch line:\n{out}"));
            if r <= 1 {
                assert!(mismatch.contains(" mismatch: "), "{mismatch}");
            }
        }
    }
}

#[test]
fn destroy_stops_a_call_blocked_on_another_thread_at_once() {
    let exe = compile("destroy_blocked");
    let ranks = run_ranks(&exe, 2, "c-destroy-blocked", &[]);
    for (r, (code, out, err)) in ranks.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}:\n{out}\n{err}");
        assert!(out.contains(&format!("DESTROY OK rank {r}")), "{out}");
    }
    let out = &ranks[0].1;
    assert!(
        out.contains("the blocked call: interrupted")
            && out.contains("dtcomm_comm_destroy was called"),
        "{out}"
    );
}

#[test]
fn a_c_program_joins_a_native_round_and_hears_when_the_server_ends_it() {
    let exe = compile("native_round");
    let token = "c-native-token";
    let (server, fingerprint) = native_server(token);
    let kids: Vec<Child> = (0..2)
        .map(|_| native_member(&exe, &server, &fingerprint, token, "2", "c-native"))
        .collect();
    let outs: Vec<(Option<i32>, String, String)> = kids
        .into_iter()
        .map(|k| {
            let o = k.wait_with_output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .collect();
    let zero = outs
        .iter()
        .find(|o| o.1.contains("rank 0 world 2"))
        .unwrap_or_else(|| panic!("no rank 0: {outs:?}"));
    let other = outs
        .iter()
        .find(|o| o.1.contains("rank 1 world 2"))
        .unwrap_or_else(|| panic!("no rank 1: {outs:?}"));
    assert!(zero.1.contains("SUM 3 rank 0 world 2"), "{zero:?}");
    assert_eq!(other.0, Some(3), "{other:?}");
    assert_eq!(zero.0, Some(0), "{zero:?}");
    assert!(
        zero.1.contains("after the loss: round_ended") && zero.1.contains("NATIVE OK rank 0"),
        "{zero:?}"
    );
    assert!(
        zero.2.contains("native rdzv="),
        "the start-up line: {}",
        zero.2
    );
    drop(server);
}

#[test]
fn a_c_program_refused_by_the_native_server_says_why_and_after_how_long() {
    let exe = compile("native_round");
    let (server, fingerprint) = native_server("the-right-token");
    let kid = native_member(
        &exe,
        &server,
        &fingerprint,
        "a-wrong-token",
        "1",
        "c-refused",
    );
    let o = kid.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("init: "))
        .unwrap_or_else(|| panic!("no init error: {err}"));
    // The set-up's own time (it once said "failed after 0ns"), and the server's reason.
    assert!(
        line.contains("setup failed after") && !line.contains("after 0ns"),
        "{line}"
    );
    assert!(line.to_lowercase().contains("token"), "{line}");
    drop(server);
}

#[test]
fn a_c_program_takes_the_next_round_when_one_ends_during_set_up() {
    use dtcomm_launch::native::{Member, NativeExplicit, NativeSettings};
    let exe = compile("native_next_round");
    let token = "c-next-round-token";
    let (server, fingerprint) = native_server(token);
    let env = |k: &str| match k {
        "DTCOMM_SOCKET_IFNAME" => Some("lo".to_owned()),
        _ => None,
    };
    let settings = NativeSettings::resolve(
        &NativeExplicit {
            endpoint: Some(server.endpoint.clone()),
            job: Some("c-next-round".into()),
            members: Some((2, 3)),
            token: Some(token.into()),
            fingerprint: Some(fingerprint.clone()),
            last_call: Some(0.0),
            ..NativeExplicit::default()
        },
        &env,
    )
    .unwrap();
    // A member that takes round 1's welcome and leaves before linking: the others are setting
    // up round 1 when it ends.
    let listener = dtcomm::DataListener::bind(&dtcomm::Options::default()).unwrap();
    let mut leaver = Member::join(settings, Some(listener)).unwrap();
    let kids: Vec<Child> = (0..2)
        .map(|_| native_member(&exe, &server, &fingerprint, token, "2:3", "c-next-round"))
        .collect();
    // Rounds form as members arrive (2 are enough): once one has all three, leave it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while leaver
        .next_welcome(Some(Duration::from_secs(30)), None)
        .unwrap()
        .world
        < 3
    {
        assert!(Instant::now() < deadline, "no round of three");
    }
    leaver.leave();
    for k in kids {
        let o = k.wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
        assert!(
            out.contains("NEXT ROUND OK") && out.contains("world 2 sum 2"),
            "{out}\n{err}"
        );
    }
    drop(server);
}

#[test]
fn the_c_cuda_status_example_gets_json_whatever_the_machine_has() {
    let exe = compile("cuda_status");
    let out = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("CUDA STATUS OK"), "{stdout}");
    let json = stdout.lines().next().unwrap();
    assert!(json.starts_with("{\"usable\":"), "{json}");
    // No GPU here: not usable, with the reason (the driver's, or the missing feature).
    if !json.starts_with("{\"usable\":true") {
        assert!(json.contains("\"reason\":\""), "{json}");
    }
    let _ = std::fs::remove_file(exe);
}

/// `name` on the `PATH`, when installed.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// `mpirun` (Open MPI's, from Debian's `openmpi-bin`) when installed.
fn mpirun() -> Option<PathBuf> {
    which("mpirun")
}

/// The C allreduce example as 3 ranks under `launcher` (its path and its arguments before
/// the program) with no endpoint: every rank reports, and the rendezvous came from `source`.
fn allreduce_example_under(launcher: &Path, args: &[&str], source: &str) {
    let exe = compile("allreduce");
    let out = Command::new(launcher)
        .args(args)
        .arg(&exe)
        .env_remove("DTCOMM_RDZV_ENDPOINT")
        .env_remove("MASTER_ADDR")
        .env_remove("MASTER_PORT")
        .env("DTCOMM_SOCKET_IFNAME", "lo")
        .env("DTCOMM_TIMEOUT", "30")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(
            stdout.contains(&format!("ALLREDUCE OK rank {r} of 3")),
            "{stdout}\n{stderr}"
        );
    }
    assert!(stderr.contains(source), "{stderr}");
}

#[test]
fn the_c_allreduce_example_runs_under_mpirun_with_no_endpoint() {
    let Some(mpirun) = mpirun() else {
        eprintln!("skipped: Open MPI's mpirun is not installed (scripts/setup.sh installs it)");
        return;
    };
    allreduce_example_under(
        &mpirun,
        &["--allow-run-as-root", "--oversubscribe", "-np", "3"],
        "Open MPI session directory (one host)",
    );
}

#[test]
fn the_c_allreduce_example_runs_under_mpiexec_hydra_with_no_endpoint() {
    let Some(hydra) = which("mpiexec.hydra") else {
        eprintln!("skipped: MPICH's mpiexec.hydra is not installed (scripts/setup.sh installs it)");
        return;
    };
    allreduce_example_under(&hydra, &["-n", "3"], "Hydra's PMI-1 socket");
}
