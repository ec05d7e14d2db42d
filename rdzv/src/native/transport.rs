//! QUIC transport settings shared by the server and its clients: thousands of small control
//! connections rather than a few bulk transfers (quinn's defaults assume 100 ms x 100 Mbit/s per
//! stream). Members send joins, heartbeats and the odd published value; the server sends
//! welcomes (a few KiB, more with every peer listed in large jobs).

/// Applies the control-connection settings; `window` is the flow-control credit per stream and
/// per connection in bytes (what the peer may have in flight to us).
pub(crate) fn control_transport(t: &mut quinn::TransportConfig, window: u32) {
    // Flow-control credit is a limit, not an allocation, but it bounds what a peer can make
    // us buffer.
    t.stream_receive_window(window.into())
        .receive_window(window.into())
        // Unacknowledged plus queued outgoing bytes per connection.
        .send_window(1 << 20)
        // No unreliable datagrams in the protocol.
        .datagram_receive_buffer_size(None)
        .datagram_send_buffer_size(0)
        // With GSO every connection keeps a send buffer of up to 10 datagrams; control
        // messages are a datagram or two, so one suffices (4096 members: ~50 MiB less on the
        // server).
        .enable_segmentation_offload(false)
        // No path MTU discovery: its probes (four per connection, up to 1452 bytes, each
        // acknowledged) were a third of the datagrams of a join, and messages are small.
        .mtu_discovery_config(None);
}
