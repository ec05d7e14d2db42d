//! Rank assignment: deterministic, and stable for members that survive a round.
//!
//! The main member always gets rank 0. A survivor keeps its rank if it is still below the new
//! world size; survivors whose rank no longer fits move into the lowest free ranks (lowest old
//! rank first), then newcomers fill what is left in the order given (the caller sorts them by
//! role, node and member id, so the result does not depend on arrival order). When rank 8 of 8
//! dies only the highest rank moves; when rank 3 dies, rank 7 takes 3 and the rest stay.

/// Ranks for a round of `survivors.len() + newcomers.len()` members. Returns the members in
/// rank order. `survivors` hold their previous ranks (distinct); `main`, if given, must be one
/// of the members and gets rank 0.
pub(crate) fn assign<T: Copy + PartialEq>(
    survivors: &[(T, u32)],
    newcomers: &[T],
    main: Option<T>,
) -> Vec<T> {
    let world = survivors.len() + newcomers.len();
    let mut slots: Vec<Option<T>> = vec![None; world];
    if let Some(m) = main
        && world > 0
    {
        slots[0] = Some(m);
    }
    let mut movers: Vec<(u32, T)> = Vec::new();
    for &(m, old) in survivors {
        if Some(m) == main {
            continue;
        }
        let old_ix = old as usize;
        if old_ix < world && slots[old_ix].is_none() {
            slots[old_ix] = Some(m);
        } else {
            movers.push((old, m));
        }
    }
    movers.sort_by_key(|&(old, _)| old);
    let mut fill = movers
        .into_iter()
        .map(|(_, m)| m)
        .chain(newcomers.iter().copied().filter(|&m| Some(m) != main));
    for slot in slots.iter_mut() {
        if slot.is_none() {
            *slot = fill.next();
        }
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::assign;

    #[test]
    fn first_round_follows_the_given_order() {
        assert_eq!(assign::<u32>(&[], &[5, 3, 9], None), vec![5, 3, 9]);
    }

    #[test]
    fn survivors_keep_ranks_and_the_top_rank_fills_the_hole() {
        // 8 members a..h at ranks 0..7; rank 3 dies.
        let survivors: Vec<(char, u32)> = "abcefgh".chars().zip([0, 1, 2, 4, 5, 6, 7]).collect();
        let r = assign(&survivors, &[], None);
        assert_eq!(r, vec!['a', 'b', 'c', 'h', 'e', 'f', 'g']);
    }

    #[test]
    fn newcomers_fill_after_movers() {
        let survivors = [('a', 0), ('b', 5)];
        let r = assign(&survivors, &['x', 'y'], None);
        // world 4: a keeps 0; b (5) moves to 1; x, y take 2 and 3.
        assert_eq!(r, vec!['a', 'b', 'x', 'y']);
    }

    #[test]
    fn main_takes_rank_zero() {
        let survivors = [('a', 0), ('b', 1)];
        let r = assign(&survivors, &['m'], Some('m'));
        assert_eq!(r, vec!['m', 'b', 'a']);
    }
}
