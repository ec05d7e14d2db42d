//! Small statistics helpers for benchmark reports.

/// The median of `xs` (mean of the middle two for even lengths); `None` if empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// `median [min-max]` of `xs` with `prec` decimals (`-` if empty), as the reports quote.
pub fn median_range(xs: &[f64], prec: usize) -> String {
    let Some(m) = median(xs) else {
        return "-".into();
    };
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{m:.prec$} [{lo:.prec$}-{hi:.prec$}]")
}

#[cfg(test)]
mod tests {
    #[test]
    fn median() {
        assert_eq!(super::median(&[]), None);
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn median_range() {
        assert_eq!(super::median_range(&[], 2), "-");
        assert_eq!(
            super::median_range(&[3.0, 1.25, 2.0], 2),
            "2.00 [1.25-3.00]"
        );
    }
}
