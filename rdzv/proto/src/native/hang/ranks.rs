//! Sets of ranks in words: "rank 3", "ranks 0-2 and 4-7", "ranks 0-499, 501-999 (999 ranks)".

/// How many items (ranks, or runs of consecutive ranks) are written out before the rest is
/// counted.
const MAX_RUNS: usize = 8;

/// `ranks` (any order, duplicates allowed) in words.
pub fn words(ranks: &[u32]) -> String {
    let mut r = ranks.to_vec();
    r.sort_unstable();
    r.dedup();
    match r.len() {
        0 => "no rank".into(),
        1 => format!("rank {}", r[0]),
        n => {
            // Runs of three or more as "a-b"; shorter ones rank by rank.
            let items: Vec<String> = runs(&r)
                .into_iter()
                .flat_map(|(a, b)| {
                    if b - a >= 2 {
                        vec![format!("{a}-{b}")]
                    } else {
                        (a..=b).map(|x| x.to_string()).collect()
                    }
                })
                .collect();
            let mut s = String::from("ranks ");
            if items.len() > MAX_RUNS {
                s.push_str(&items[..MAX_RUNS].join(", "));
                s.push_str(&format!(", ... ({n} ranks)"));
            } else {
                let (last, rest) = items.split_last().expect("two or more ranks");
                s.push_str(&rest.join(", "));
                s.push_str(" and ");
                s.push_str(last);
            }
            s
        }
    }
}

/// Sorted, deduplicated ranks as runs of consecutive ranks (first, last).
fn runs(sorted: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &x in sorted {
        match out.last_mut() {
            Some((_, b)) if b.checked_add(1) == Some(x) => *b = x,
            _ => out.push((x, x)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn ranks_in_words() {
        assert_eq!(words(&[]), "no rank");
        assert_eq!(words(&[3]), "rank 3");
        assert_eq!(words(&[1, 0]), "ranks 0 and 1");
        assert_eq!(words(&[0, 1, 2, 4, 5]), "ranks 0-2, 4 and 5");
        assert_eq!(words(&[0, 1, 2, 4, 5, 6, 7]), "ranks 0-2 and 4-7");
        assert_eq!(words(&[0, 2, 4]), "ranks 0, 2 and 4");
        assert_eq!(
            words(&[u32::MAX, u32::MAX - 1]),
            format!("ranks {} and {}", u32::MAX - 1, u32::MAX)
        );
        let evens: Vec<u32> = (0..40).map(|i| i * 2).collect();
        assert_eq!(
            words(&evens),
            "ranks 0, 2, 4, 6, 8, 10, 12, 14, ... (40 ranks)"
        );
        let big: Vec<u32> = (0..1000).filter(|&r| r != 500).collect();
        assert_eq!(words(&big), "ranks 0-499 and 501-999");
    }
}
