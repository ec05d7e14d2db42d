//! The servers under test, each in its own process so that its memory can be read.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A server process; killed on drop.
pub struct ServerProcess {
    /// The child.
    pub child: Child,
    /// `host:port` for clients.
    pub endpoint: String,
    /// Native endpoint and certificate fingerprint (dt-rdzv only).
    pub native: Option<(String, String)>,
    /// What it is, for reports.
    pub name: &'static str,
}

impl ServerProcess {
    /// Resident memory now, and the peak (VmRSS, VmHWM), in bytes.
    pub fn rss(&self) -> (u64, u64) {
        rss_bytes(self.child.id())
    }

    /// CPU time (user + system) the server has used so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.child.id())
    }

    /// Stops the server by PID (SIGTERM for dt-rdzv, closing stdin for the Python one).
    pub fn stop(mut self) {
        // SAFETY: `kill` takes plain integers. `self.child` is our own child process, not yet
        // reaped (`wait` comes after), so its pid still names it and cannot have been reused by
        // another process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU seconds of a process (from /proc/PID/stat); 0 if unreadable.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // fields after the parenthesised command name; utime and stime are fields 14 and 15
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: `sysconf` takes a plain integer, touches no memory of ours and has no preconditions;
    // an error (-1) is clamped to 1 below.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// (VmRSS, VmHWM) of a process, in bytes; zeros if unreadable.
pub fn rss_bytes(pid: u32) -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (0, 0);
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn read_lines(child: &mut Child, n: usize) -> std::io::Result<Vec<String>> {
    let out = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut r = BufReader::new(out);
    let mut lines = Vec::new();
    for _ in 0..n {
        let mut line = String::new();
        r.read_line(&mut line)?;
        lines.push(line.trim().to_string());
    }
    Ok(lines)
}

fn read_ready(child: &mut Child, prefix: &str) -> std::io::Result<String> {
    let line = read_lines(child, 1)?.remove(0);
    line.strip_prefix(prefix)
        .map(str::to_owned)
        .ok_or_else(|| std::io::Error::other(format!("server did not start: {line:?}")))
}

/// The token `start_dt_rdzv` gives the server.
pub const BENCH_TOKEN: &str = "rdzv-perf";

/// Starts `dt-rdzv serve` on ephemeral loopback ports (TCPStore, native, HTTP) with default
/// rendezvous settings and the token [`BENCH_TOKEN`].
pub fn start_dt_rdzv(bin: &Path) -> std::io::Result<ServerProcess> {
    start_dt_rdzv_with(bin, &[])
}

/// [`start_dt_rdzv`] with more `serve` flags.
pub fn start_dt_rdzv_with(bin: &Path, extra: &[String]) -> std::io::Result<ServerProcess> {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--native-port",
            "0",
            "--http-port",
            "0",
        ])
        .args(extra)
        .env(
            "DTRDZV_LOG",
            std::env::var("DTRDZV_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env("DTRDZV_TOKEN", BENCH_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let lines = read_lines(&mut child, 3)?;
    let bad = || std::io::Error::other(format!("server did not start: {lines:?}"));
    let addr = lines[0]
        .strip_prefix("dt-rdzv listening tcpstore=")
        .ok_or_else(bad)?
        .to_string();
    let (native, fp) = lines[1]
        .strip_prefix("dt-rdzv listening native=")
        .and_then(|r| r.split_once(" fingerprint="))
        .ok_or_else(bad)?;
    Ok(ServerProcess {
        child,
        endpoint: addr,
        native: Some((native.to_string(), fp.to_string())),
        name: "dt-rdzv",
    })
}

/// Starts torch's own TCPStore server (`is_master=True`, libuv, the default) in a Python
/// process that serves until its stdin closes.
pub fn start_torch_store(python: &str) -> std::io::Result<ServerProcess> {
    let code = r#"
import sys, resource, datetime
import torch.distributed as d
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
s = d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
               timeout=datetime.timedelta(seconds=600))
print("torch listening tcpstore=127.0.0.1:%d" % s.port, flush=True)
sys.stdin.read()
"#;
    let mut child = Command::new(python)
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("TORCH_CPP_LOG_LEVEL", "ERROR")
        .spawn()?;
    let addr = read_ready(&mut child, "torch listening tcpstore=")?;
    // keep stdin open: the server runs until we drop it
    if let Some(stdin) = child.stdin.as_mut() {
        stdin.flush()?;
    }
    Ok(ServerProcess {
        child,
        endpoint: addr,
        native: None,
        name: "torch TCPStore",
    })
}
