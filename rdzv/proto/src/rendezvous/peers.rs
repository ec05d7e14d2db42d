//! Which peers a rank needs, and where each rank sits on its node.

use std::collections::{BTreeMap, BTreeSet};

/// A node with at most this many members of a round lists all of them in each one's welcome;
/// past it (every member of a big job on one host, or a node claiming thousands of ranks)
/// each gets the node's first member and its ring and tree neighbours within the node, so
/// that a welcome's size never grows with the job.
pub(crate) const MAX_NODE_PEERS: usize = 64;

/// Ranks `rank` talks to in the usual schedules of a `world`-member round: rank 0, its ring
/// neighbours, its binary-tree parent and children, and (from `same_node`, the ranks of its
/// node in rank order, where it is the `local`th) its host's members: all of them up to
/// [`MAX_NODE_PEERS`], else the node's first and its ring and tree neighbours within the
/// node. Includes `rank` itself, so a member sees its own observed address.
pub(crate) fn neighbours(rank: u32, world: u32, same_node: &[u32], local: u32) -> BTreeSet<u32> {
    let mut s = BTreeSet::new();
    if world == 0 {
        return s;
    }
    s.insert(rank);
    s.insert(0);
    s.insert((rank + 1) % world);
    s.insert((rank + world - 1) % world);
    if rank > 0 {
        s.insert((rank - 1) / 2);
    }
    for c in [2 * rank as u64 + 1, 2 * rank as u64 + 2] {
        if c < world as u64 {
            s.insert(c as u32);
        }
    }
    if same_node.len() <= MAX_NODE_PEERS {
        s.extend(same_node.iter().copied());
    } else {
        let (l, n) = (local as usize, same_node.len());
        let mut local_ix = vec![0, (l + 1) % n, (l + n - 1) % n, 2 * l + 1, 2 * l + 2];
        if l > 0 {
            local_ix.push((l - 1) / 2);
        }
        s.extend(
            local_ix
                .into_iter()
                .filter_map(|i| same_node.get(i).copied()),
        );
    }
    s
}

/// Per-node layout of a round, from each rank's node name (index = rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Per rank: (local rank, local world, node rank).
    pub(crate) per_rank: Vec<(u32, u32, u32)>,
    /// Ranks of each node, by node rank.
    pub(crate) nodes: Vec<Vec<u32>>,
}

/// Nodes ordered by their lowest rank; local ranks by rank within the node.
pub(crate) fn layout<'a>(nodes_by_rank: impl IntoIterator<Item = &'a str>) -> Layout {
    let mut index: BTreeMap<&str, u32> = BTreeMap::new();
    let mut nodes: Vec<Vec<u32>> = Vec::new();
    let mut node_of = Vec::new();
    for (rank, node) in nodes_by_rank.into_iter().enumerate() {
        let n = *index.entry(node).or_insert_with(|| {
            nodes.push(Vec::new());
            (nodes.len() - 1) as u32
        });
        // Ranks come in order: this one's place on its node is the count before it.
        let local = nodes[n as usize].len() as u32;
        nodes[n as usize].push(rank as u32);
        node_of.push((n, local));
    }
    let per_rank = node_of
        .iter()
        .map(|&(n, local)| (local, nodes[n as usize].len() as u32, n))
        .collect();
    Layout { per_rank, nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_of_a_middle_rank() {
        let s = neighbours(5, 16, &[4, 5], 1);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![0, 2, 4, 5, 6, 11, 12]
        );
    }

    #[test]
    fn neighbours_of_tiny_worlds() {
        assert_eq!(neighbours(0, 1, &[0], 0).len(), 1);
        assert_eq!(
            neighbours(1, 2, &[], 0).into_iter().collect::<Vec<_>>(),
            vec![0, 1]
        );
    }

    #[test]
    fn a_crowded_node_gives_its_leader_and_local_neighbours() {
        // The even ranks of a 2000-member round share one node: rank 1000 is its 500th.
        let node: Vec<u32> = (0..1000).map(|i| 2 * i).collect();
        let s = neighbours(1000, 2000, &node, 500);
        // Global: 0, ring 999 and 1001, tree parent 499; on the node: its first (0), ring
        // 998 and 1002, tree parent 498 (its children would be past the node's end).
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![0, 498, 499, 998, 999, 1000, 1001, 1002]
        );
        let small: Vec<u32> = (0..MAX_NODE_PEERS as u32).collect();
        assert_eq!(neighbours(3, 64, &small, 3).len(), MAX_NODE_PEERS);
    }

    #[test]
    fn layout_groups_by_node_in_rank_order() {
        let l = layout(["b", "a", "b", "c", "a"]);
        assert_eq!(l.nodes, vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(l.per_rank[2], (1, 2, 0));
        assert_eq!(l.per_rank[4], (1, 2, 1));
        assert_eq!(l.per_rank[3], (0, 1, 2));
    }
}
