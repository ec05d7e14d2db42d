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
    /// What it is, for reports.
    pub name: &'static str,
}

impl ServerProcess {
    /// Resident memory now, and the peak (VmRSS, VmHWM), in bytes.
    pub fn rss(&self) -> (u64, u64) {
        rss_bytes(self.child.id())
    }

    /// Stops the server by PID (SIGTERM for dt-rdzv, closing stdin for the Python one).
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
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

fn read_ready(child: &mut Child, prefix: &str) -> std::io::Result<String> {
    let out = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    line.trim()
        .strip_prefix(prefix)
        .map(str::to_owned)
        .ok_or_else(|| std::io::Error::other(format!("server did not start: {line:?}")))
}

/// Starts `dt-rdzv serve` on an ephemeral loopback port.
pub fn start_dt_rdzv(bin: &Path) -> std::io::Result<ServerProcess> {
    let mut child = Command::new(bin)
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .env(
            "DTRDZV_LOG",
            std::env::var("DTRDZV_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let addr = read_ready(&mut child, "dt-rdzv listening tcpstore=")?;
    Ok(ServerProcess {
        child,
        endpoint: addr,
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
        name: "torch TCPStore",
    })
}
