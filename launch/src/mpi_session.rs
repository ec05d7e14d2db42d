//! Meeting under `mpirun` on one host with no rendezvous endpoint set (the rule of Python's
//! `dtcomm/_mpi_session.py`, same file names).
//!
//! Open MPI gives every rank of a job on one host the same session directory (Open MPI 4:
//! `OMPI_MCA_orte_jobfam_session_dir`; 5: `PMIX_SERVER_TMPDIR`), private to that `mpirun` and
//! removed when it ends. Rank 0 hosts a store on loopback and leaves its address there in a
//! file (written whole, then renamed into place); the others read it, polling until the
//! deadline. The n-th init of a process reads the n-th file, never the address of a store an
//! earlier init already shut down.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a resolved endpoint names a session directory.
pub const MPI_SESSION: &str = "mpi-session://";

/// The session directory every rank of an Open MPI job on one host shares, or `None` when the
/// job is not Open MPI's or spans hosts.
pub fn session_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let (size, local) = (
        var("OMPI_COMM_WORLD_SIZE")?,
        var("OMPI_COMM_WORLD_LOCAL_SIZE")?,
    );
    if size.trim() != local.trim() {
        return None;
    }
    var("OMPI_MCA_orte_jobfam_session_dir").or_else(|| var("PMIX_SERVER_TMPDIR"))
}

/// The file the n-th init (from 1) of run `run_id` meets in.
pub fn endpoint_file(dir: &str, run_id: &str, n: u64) -> PathBuf {
    let safe: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Path::new(dir).join(format!("dtcomm-{safe}-{n}.endpoint"))
}

/// Rank 0: leaves `endpoint` at `path`, whole or not at all.
pub fn publish(path: &Path, endpoint: &str) -> Result<(), String> {
    let tmp = path.with_extension(format!("endpoint.{}.tmp", std::process::id()));
    std::fs::write(&tmp, endpoint)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            format!(
                "rank 0: cannot leave the store's address in Open MPI's session directory \
                 ({}): {e}; set DTCOMM_RDZV_ENDPOINT instead",
                path.display()
            )
        })
}

/// The others: the address rank 0 left at `path`, polled until `timeout`.
pub fn read(path: &Path, rank: usize, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            let s = s.trim();
            if !s.is_empty() {
                return Ok(s.to_owned());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "rank {rank}: rank 0 did not leave its store's address in Open MPI's session \
                 directory within {timeout:?} ({} is missing): is rank 0 running its init too?",
                path.display()
            ));
        }
        if let Some(why) = dtcomm::interrupt::requested() {
            return Err(format!(
                "rank {rank}: interrupted while waiting for rank 0's store address ({why})"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_jobs_only_and_the_newer_variable_second() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let one = env(&[
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_orte_jobfam_session_dir", "/tmp/ompi.vm.0/pid.9"),
            ("PMIX_SERVER_TMPDIR", "/tmp/other"),
        ]);
        assert_eq!(session_dir(&one).as_deref(), Some("/tmp/ompi.vm.0/pid.9"));
        let five = env(&[
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_SERVER_TMPDIR", "/tmp/prte"),
        ]);
        assert_eq!(session_dir(&five).as_deref(), Some("/tmp/prte"));
        let two_hosts = env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_orte_jobfam_session_dir", "/tmp/s"),
        ]);
        assert_eq!(session_dir(&two_hosts), None);
    }

    #[test]
    fn the_address_is_read_whole_or_the_wait_names_the_file() {
        let dir = std::env::temp_dir().join(format!("dtcomm-mpi-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let f = endpoint_file(d, "run/1 x", 2);
        assert!(f.ends_with("dtcomm-run_1_x-2.endpoint"));
        let e = read(&f, 1, Duration::from_millis(50)).unwrap_err();
        assert!(
            e.contains("rank 1") && e.contains("dtcomm-run_1_x-2.endpoint"),
            "{e}"
        );
        publish(&f, "127.0.0.1:4242").unwrap();
        assert_eq!(
            read(&f, 1, Duration::from_secs(1)).unwrap(),
            "127.0.0.1:4242"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
