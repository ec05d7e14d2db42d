//! Which peers a rank needs, and where each rank sits on its node.

use std::collections::{BTreeMap, BTreeSet};

/// Ranks `rank` talks to in the usual schedules of a `world`-member round: rank 0, its ring
/// neighbours, its binary-tree parent and children, and (from `same_node`) its host's members.
/// Includes `rank` itself, so a member sees its own observed address.
pub(crate) fn neighbours(rank: u32, world: u32, same_node: &[u32]) -> BTreeSet<u32> {
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
    s.extend(same_node.iter().copied());
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
        nodes[n as usize].push(rank as u32);
        node_of.push(n);
    }
    let per_rank = node_of
        .iter()
        .enumerate()
        .map(|(rank, &n)| {
            let members = &nodes[n as usize];
            let local = members.iter().position(|&r| r == rank as u32).unwrap_or(0);
            (local as u32, members.len() as u32, n)
        })
        .collect();
    Layout { per_rank, nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_of_a_middle_rank() {
        let s = neighbours(5, 16, &[4, 5]);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![0, 2, 4, 5, 6, 11, 12]
        );
    }

    #[test]
    fn neighbours_of_tiny_worlds() {
        assert_eq!(neighbours(0, 1, &[0]).len(), 1);
        assert_eq!(
            neighbours(1, 2, &[]).into_iter().collect::<Vec<_>>(),
            vec![0, 1]
        );
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
