//! `emu_wire`: the wire between the emulated hosts of `scripts/emu_cluster.sh` on kernels
//! without `sch_netem` (see [`dt_bench::emu`]). It makes one TAP interface per name given,
//! switches Ethernet frames between them and delivers each after its links' rate and delay.
//! The script moves the interfaces into the hosts' namespaces; they vanish when this exits.
//!
//!     emu_wire --rate 10gbit --delay 50us dtct0 dtct1 dtcbr0

#![warn(clippy::undocumented_unsafe_blocks)]

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use clap::Parser;
use dt_bench::emu::{line::DelayLine, link::Links, switch::MacTable, tap};

/// Switch frames between TAP interfaces with an emulated link rate and delay per port.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Link rate of every port, each way (`10gbit`, `2500mbit`, `0` for none).
    #[arg(long, default_value = "10gbit", value_parser = parse_rate)]
    rate: u64,
    /// Delay of every port's link, each way (`50us`, `1ms`, `0`): host to host a frame crosses
    /// two links.
    #[arg(long, default_value = "50us", value_parser = parse_delay)]
    delay: Duration,
    /// Most bytes in flight on the wire; frames past it are dropped.
    #[arg(long, default_value_t = 256 << 20)]
    limit: usize,
    /// The TAP interfaces to make, one per port.
    #[arg(required = true, num_args = 2..)]
    ports: Vec<String>,
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(u, m)| s.strip_suffix(u).map(|n| (n.to_string(), *m)))
        .unwrap_or((s.clone(), 1.0));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("rate {s:?}: e.g. 10gbit, 500mbit, 0"))?;
    Ok((v * mult) as u64)
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = [("us", 1e-6), ("ms", 1e-3), ("ns", 1e-9), ("s", 1.0)]
        .iter()
        .find_map(|(u, m)| s.strip_suffix(u).map(|n| (n.to_string(), *m)))
        .unwrap_or((s.clone(), 1e-6));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("delay {s:?}: e.g. 50us, 1ms, 0"))?;
    Ok(Duration::from_secs_f64(v * mult))
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("emu_wire: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> std::io::Result<()> {
    let mut taps = a
        .ports
        .iter()
        .map(|n| tap::open(n))
        .collect::<std::io::Result<Vec<_>>>()?;
    // Wake-ups as exact as the kernel can make them (the default slack is 50 µs).
    // SAFETY: `PR_SET_TIMERSLACK` takes its value as a plain integer (no pointer is passed or kept)
    // and changes only this thread's timer slack; a failure leaves the default and is harmless.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let n = taps.len();
    let mut links = Links::new(n, (a.rate > 0).then_some(a.rate), a.delay.as_nanos() as u64);
    let mut table = MacTable::new(n);
    let mut line = DelayLine::new(a.limit);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    let mut fds: Vec<libc::pollfd> = taps
        .iter()
        .map(|t| libc::pollfd {
            fd: t.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = vec![0u8; 65536 + 14];
    eprintln!(
        "emu_wire: {n} ports ({}), {} bit/s and {:?} each way per link",
        a.ports.join(" "),
        a.rate,
        a.delay
    );
    loop {
        let t = now();
        while let Some((port, frame)) = line.pop_due(t) {
            // A receiver whose queue is full drops the frame, as a NIC would; so does one that
            // is down (EIO: not up yet, or moving to its host's namespace).
            match taps[port].write(&frame) {
                Ok(_) => {}
                Err(e) if idle(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let wait = line.next_at().map(|at| at.saturating_sub(now()));
        let ts = wait.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `fds` is a live `Vec` of exactly `n` initialised pollfds (one per tap), which
        // `ppoll` reads and whose `revents` it writes during the call only; `tsp` is null or points
        // at `ts`, a live local `timespec`; a null signal mask leaves the mask alone.
        let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), n as _, tsp, std::ptr::null()) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds.iter().all(|f| f.revents & libc::POLLIN == 0) && rc > 0 {
            // Only errors: an interface is down (before the script sets it up). Not a spin,
            // and no later than the next frame is due.
            let nap = line
                .next_at()
                .map_or(1_000_000, |at| at.saturating_sub(now()));
            std::thread::sleep(Duration::from_nanos(nap.min(1_000_000)));
        }
        for from in 0..n {
            if fds[from].revents & libc::POLLIN == 0 {
                continue;
            }
            // A bounded batch per port per turn, so no sender starves the others.
            for _ in 0..64 {
                let len = match taps[from].read(&mut buf) {
                    Ok(len) => len,
                    Err(e) if idle(&e) => break,
                    Err(e) => return Err(e),
                };
                let frame = &buf[..len];
                let t = now();
                let at_switch = links.depart(t, from, len);
                for to in table.route(from, frame) {
                    let due = links.arrive(at_switch, to, len);
                    line.push(due, to, frame.to_vec());
                }
            }
        }
    }
}

/// Nothing to read, or no room to write, now: would block, or the interface is down (EIO).
fn idle(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_delays_parse_as_tc_writes_them() {
        assert_eq!(parse_rate("10gbit"), Ok(10_000_000_000));
        assert_eq!(parse_rate("2500mbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert_eq!(parse_delay("50us"), Ok(Duration::from_micros(50)));
        assert_eq!(parse_delay("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_delay("0"), Ok(Duration::ZERO));
    }
}
