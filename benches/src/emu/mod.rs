//! `emu_wire`: a userspace wire for the emulated cluster of `scripts/emu_cluster.sh`, for
//! kernels without `sch_netem`. Each emulated host's NIC is a TAP device whose other end is
//! this process; frames between them are switched by MAC address and delivered after the
//! link's serialisation time and delay, as netem on both ends of a veth would.
//!
//! * [`link`]: when a frame leaves its sender's NIC and when it reaches the receiver (pure).
//! * [`switch`]: which ports a frame goes to (MAC learning, flooding; pure).
//! * [`line`](mod@line): the frames in flight, in delivery order (pure).
//! * [`tap`]: opening TAP devices (Linux I/O).

pub mod line;
pub mod link;
pub mod switch;
pub mod tap;
