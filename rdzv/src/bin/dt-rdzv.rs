//! `dt-rdzv`: the rendezvous server CLI.
fn main() {}
