//! Where a frame goes: a learning switch over the wire's ports.

use std::collections::HashMap;

/// MAC addresses seen as sources, by the port they came from.
#[derive(Debug, Default, Clone)]
pub struct MacTable {
    ports: usize,
    learned: HashMap<[u8; 6], usize>,
}

impl MacTable {
    /// A switch of `ports` ports that knows no address yet.
    pub fn new(ports: usize) -> Self {
        Self {
            ports,
            learned: HashMap::new(),
        }
    }

    /// Learns `frame`'s source from port `from` and returns the ports it goes to: the one
    /// that owns its destination, or every other port for broadcast, multicast and unknown
    /// destinations. A runt (shorter than an Ethernet header) goes nowhere.
    pub fn route(&mut self, from: usize, frame: &[u8]) -> Vec<usize> {
        if frame.len() < 14 {
            return Vec::new();
        }
        let dst: [u8; 6] = frame[0..6].try_into().expect("6 bytes");
        let src: [u8; 6] = frame[6..12].try_into().expect("6 bytes");
        if src[0] & 1 == 0 {
            self.learned.insert(src, from);
        }
        match self.learned.get(&dst) {
            Some(&p) if dst[0] & 1 == 0 => {
                if p == from {
                    Vec::new()
                } else {
                    vec![p]
                }
            }
            _ => (0..self.ports).filter(|&p| p != from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00, 0, 0]);
        f
    }

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const BCAST: [u8; 6] = [0xff; 6];

    #[test]
    fn floods_until_it_learns_then_forwards_to_one_port() {
        let mut t = MacTable::new(3);
        assert_eq!(
            t.route(0, &frame(BCAST, A)),
            vec![1, 2],
            "ARP request floods"
        );
        assert_eq!(
            t.route(1, &frame(A, B)),
            vec![0],
            "the reply goes to A's port only"
        );
        assert_eq!(t.route(0, &frame(B, A)), vec![1]);
        assert_eq!(
            t.route(0, &frame(A, A)),
            Vec::<usize>::new(),
            "never back out"
        );
    }

    #[test]
    fn runts_go_nowhere_and_multicast_floods() {
        let mut t = MacTable::new(2);
        assert!(t.route(0, &[0; 10]).is_empty());
        let mcast = [0x33, 0x33, 0, 0, 0, 1];
        assert_eq!(t.route(0, &frame(mcast, A)), vec![1]);
    }
}
