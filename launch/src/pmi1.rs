//! A PMI-1 client: the line protocol MPICH's Hydra (`mpiexec.hydra`, Intel MPI's `mpirun`)
//! speaks to every rank over the socket it leaves open as `PMI_FD` (or at `PMI_PORT`): init,
//! the job's key-value space, put, a barrier, get, finalize. Each request is one line of
//! `key=value` words starting with `cmd=`, each answer one line the same way (PMI 1.1's wire
//! format, as MPICH's `simple_pmi.c` writes it). The pure half ([`request`], [`parse`]) is
//! tested here; [`Pmi1`] runs it over the socket, every read bounded by a deadline.
//!
//! Hydra kills a job one of whose processes initialised PMI and exits without finalising
//! (`Killed (signal 9)` for every rank), so the client is finalised at process exit, unless
//! a request went unanswered: then the job should end, and does.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// One request line: `cmd=<cmd>` and the arguments, `\n`-terminated. Values may not hold
/// spaces, `=` or newlines (the protocol has no quoting).
pub fn request(cmd: &str, args: &[(&str, &str)]) -> Result<String, String> {
    let mut line = format!("cmd={cmd}");
    for (k, v) in args {
        if v.is_empty() || v.contains([' ', '=', '\n', '\r']) {
            return Err(format!(
                "PMI {cmd}: {k}={v:?} cannot travel (empty, or a space, '=' or newline)"
            ));
        }
        line.push_str(&format!(" {k}={v}"));
    }
    line.push('\n');
    Ok(line)
}

/// The `key=value` words of an answer line.
pub fn parse(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A key PMI accepts (at most `max` bytes, Hydra allows 64): `key` itself when short enough,
/// else its head and a hash of the whole, so distinct long keys stay distinct.
pub fn fit_key(key: &str, max: usize) -> String {
    if key.len() < max {
        return key.to_owned();
    }
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let head: String = key.chars().take(max.saturating_sub(18)).collect();
    format!("{head}.{hash:016x}")
}

/// The socket to the process manager.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    /// Bounds every read and write on the socket by `t`.
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
            Conn::Tcp(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
        }
    }
}

impl std::io::Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.flush(),
            Conn::Tcp(s) => s.flush(),
        }
    }
}

/// A PMI-1 client, initialised: the job's key-value space and its limits.
pub struct Pmi1 {
    conn: Mutex<BufReader<Conn>>,
    kvs: String,
    keylen_max: usize,
    vallen_max: usize,
}

static CLIENT: OnceLock<Result<Pmi1, String>> = OnceLock::new();

/// Set when a request went unanswered within its deadline: the process then exits without
/// finalising, so that Hydra ends the whole job at once (a finalised process's failure would
/// leave the job running until the rank that never arrived ends by itself).
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// `cmd=finalize` at process exit, if the client was started (Hydra requires it) and nothing
/// was given up on.
extern "C" fn finalize_at_exit() {
    if ABANDONED.load(Ordering::Acquire) {
        return;
    }
    if let Some(Ok(p)) = CLIENT.get() {
        let _ = p.call("finalize", &[], Duration::from_secs(5));
    }
}

impl Pmi1 {
    /// The process's client: connected and initialised on first use (`PMI_FD`, else
    /// `PMI_PORT`), or why it cannot be.
    pub fn get(timeout: Duration) -> Result<&'static Pmi1, String> {
        CLIENT
            .get_or_init(|| {
                let p = Pmi1::start(&|k| std::env::var(k).ok(), timeout)?;
                // SAFETY: registers a plain extern "C" function.
                if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                    tracing::warn!("dtcomm: cannot finalise PMI at exit (atexit failed)");
                }
                Ok(p)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn start(env: &dyn Fn(&str) -> Option<String>, timeout: Duration) -> Result<Pmi1, String> {
        let conn = match (env("PMI_FD"), env("PMI_PORT")) {
            (Some(fd), _) => {
                let fd: i32 = fd
                    .trim()
                    .parse()
                    .map_err(|_| format!("PMI_FD={fd:?} is not a file descriptor"))?;
                // SAFETY: the process manager left this socket open for this process; it is
                // owned here from now on (and stays open until exit).
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                    return Err(format!("PMI_FD={fd} is not open in this process"));
                }
                // SAFETY: as above.
                Conn::Unix(unsafe { UnixStream::from_raw_fd(fd) })
            }
            (None, Some(port)) => Conn::Tcp(
                TcpStream::connect(port.trim())
                    .map_err(|e| format!("PMI_PORT={port}: cannot connect: {e}"))?,
            ),
            (None, None) => return Err("neither PMI_FD nor PMI_PORT is set".into()),
        };
        let mut p = Pmi1 {
            conn: Mutex::new(BufReader::new(conn)),
            kvs: String::new(),
            keylen_max: 64,
            vallen_max: 1024,
        };
        let init = p.call(
            "init",
            &[("pmi_version", "1"), ("pmi_subversion", "1")],
            timeout,
        )?;
        if init.get("cmd").map(String::as_str) != Some("response_to_init") {
            return Err(format!(
                "the process manager does not speak PMI-1 (answered {init:?}); give every \
                 rank a rendezvous endpoint (DTCOMM_RDZV_ENDPOINT=host:port)"
            ));
        }
        let maxes = p.call("get_maxes", &[], timeout)?;
        let num = |k: &str, d: usize| maxes.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        p.keylen_max = num("keylen_max", 64);
        p.vallen_max = num("vallen_max", 1024);
        let kvs = p.call("get_my_kvsname", &[], timeout)?;
        p.kvs = kvs
            .get("kvsname")
            .cloned()
            .ok_or_else(|| format!("PMI get_my_kvsname: no kvsname in {kvs:?}"))?;
        tracing::debug!("dtcomm: PMI-1 key-value space {}", p.kvs);
        Ok(p)
    }

    /// One request and its answer; an answer with `rc` other than 0 is an error naming `msg`.
    fn call(
        &self,
        cmd: &str,
        args: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<HashMap<String, String>, String> {
        let line = request(cmd, args)?;
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        c.get_ref()
            .set_timeouts(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| format!("PMI {cmd}: {e}"))?;
        c.get_mut()
            .write_all(line.as_bytes())
            .map_err(|e| format!("PMI {cmd}: writing to the process manager: {e}"))?;
        let mut answer = String::new();
        match c.read_line(&mut answer) {
            Ok(0) => return Err(format!("PMI {cmd}: the process manager closed the socket")),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                ABANDONED.store(true, Ordering::Release);
                return Err(format!("PMI {cmd}: no answer within {timeout:?}"));
            }
            Err(e) => return Err(format!("PMI {cmd}: reading the answer: {e}")),
        }
        let words = parse(&answer);
        match words.get("rc").map(String::as_str) {
            None | Some("0") => Ok(words),
            Some(rc) => Err(format!(
                "PMI {cmd}: rc={rc} {}",
                words.get("msg").map_or("", String::as_str)
            )),
        }
    }

    /// Puts `value` under `key` in the job's space.
    pub fn publish(&self, key: &str, value: &str, timeout: Duration) -> Result<(), String> {
        if value.len() >= self.vallen_max {
            return Err(format!(
                "PMI put: value of {} bytes, the process manager takes {}",
                value.len(),
                self.vallen_max
            ));
        }
        let key = fit_key(key, self.keylen_max);
        self.call(
            "put",
            &[("kvsname", &self.kvs), ("key", &key), ("value", value)],
            timeout,
        )
        .map(drop)
    }

    /// Waits until every rank of the job has entered the barrier, until `timeout`.
    pub fn barrier(&self, timeout: Duration) -> Result<(), String> {
        self.call("barrier_in", &[], timeout)
            .map(drop)
            .map_err(|e| format!("{e}: not every rank reached its init (PMI does not say which)"))
    }

    /// The value under `key` in the job's space (put before the last barrier).
    pub fn lookup(&self, key: &str, timeout: Duration) -> Result<String, String> {
        let key = fit_key(key, self.keylen_max);
        let words = self.call("get", &[("kvsname", &self.kvs), ("key", &key)], timeout)?;
        words
            .get("value")
            .cloned()
            .ok_or_else(|| format!("PMI get {key}: no value in the answer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_line_of_words() {
        assert_eq!(
            request(
                "put",
                &[
                    ("kvsname", "kvs_1_0"),
                    ("key", "k"),
                    ("value", "10.0.0.1:5")
                ]
            ),
            Ok("cmd=put kvsname=kvs_1_0 key=k value=10.0.0.1:5\n".into())
        );
        assert_eq!(request("barrier_in", &[]), Ok("cmd=barrier_in\n".into()));
        assert!(request("put", &[("value", "a b")]).is_err());
        assert!(request("put", &[("value", "a=b")]).is_err());
        assert!(request("put", &[("value", "")]).is_err());
    }

    #[test]
    fn answers_parse_into_words() {
        let w = parse("cmd=get_result rc=0 msg=success value=[::1]:29400\n");
        assert_eq!(w["cmd"], "get_result");
        assert_eq!(w["rc"], "0");
        assert_eq!(w["value"], "[::1]:29400");
        let missing = parse("cmd=get_result rc=-1 msg=key_missing_not_found value=unknown");
        assert_eq!(missing["rc"], "-1");
    }

    #[test]
    fn long_keys_fit_and_stay_distinct() {
        assert_eq!(fit_key("dtcomm.job.1", 64), "dtcomm.job.1");
        let a = fit_key(&format!("dtcomm.{}.1", "r".repeat(100)), 64);
        let b = fit_key(&format!("dtcomm.{}.2", "r".repeat(100)), 64);
        assert!(a.len() < 64 && b.len() < 64, "{a} {b}");
        assert_ne!(a, b);
    }

    #[test]
    fn no_process_manager_is_a_clear_error() {
        let none = |_: &str| None;
        let e = Pmi1::start(&none, Duration::from_secs(1))
            .err()
            .expect("nothing to reach");
        assert!(e.contains("PMI_FD"), "{e}");
        let closed = |k: &str| (k == "PMI_FD").then(|| "987".to_owned());
        let e = Pmi1::start(&closed, Duration::from_secs(1))
            .err()
            .expect("fd not open");
        assert!(e.contains("not open"), "{e}");
    }

    #[test]
    fn init_limits_put_and_an_unanswered_barrier_against_a_fake_manager() {
        // A socket pair whose far end plays the process manager (then stops answering).
        let (mine, theirs) = UnixStream::pair().unwrap();
        let far = std::thread::spawn(move || {
            let mut r = BufReader::new(theirs);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.starts_with("cmd=init pmi_version=1"), "{line}");
            r.get_mut()
                .write_all(b"cmd=response_to_init rc=0\n")
                .unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
            assert_eq!(line, "cmd=get_maxes\n");
            r.get_mut()
                .write_all(b"cmd=maxes kvsname_max=256 keylen_max=32 vallen_max=64\n")
                .unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
            r.get_mut()
                .write_all(b"cmd=my_kvsname kvsname=kvs_7\n")
                .unwrap();
            // Then a put and a get that time out (never answered).
            line.clear();
            r.read_line(&mut line).unwrap();
            r.get_mut()
                .write_all(b"cmd=put_result rc=0 msg=success\n")
                .unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        use std::os::fd::IntoRawFd;
        let fd = mine.into_raw_fd().to_string();
        let env = move |k: &str| (k == "PMI_FD").then(|| fd.clone());
        let p = Pmi1::start(&env, Duration::from_secs(5)).expect("init");
        assert_eq!(
            (p.kvs.as_str(), p.keylen_max, p.vallen_max),
            ("kvs_7", 32, 64)
        );
        p.publish("dtcomm.x.1", "10.0.0.1:5", Duration::from_secs(5))
            .expect("put");
        assert!(
            p.publish("k", &"v".repeat(64), Duration::from_secs(1))
                .is_err()
        );
        let e = p
            .barrier(Duration::from_millis(100))
            .expect_err("never answered");
        assert!(e.contains("no answer within"), "{e}");
        far.join().unwrap();
    }
}
