//! The nccl-tests table: preamble, header, rows and footer, with nccl-tests' column widths and
//! its number formatting (2 decimals, fewer when the value does not fit, then exponent form).

use std::fmt::Write as _;

/// One measured call: average time per op, per-call median, bandwidths, wrong elements.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Cell {
    /// Average microseconds per op (maximum over ranks).
    pub time: f64,
    /// Median microseconds of single calls (maximum over ranks of each rank's median).
    pub p50_us: f64,
    /// Algorithm bandwidth, GB/s (10^9 B/s).
    pub alg_bw: f64,
    /// Bus bandwidth, GB/s.
    pub bus_bw: f64,
    /// Wrong elements in the check call (`None`: not checked).
    pub wrong: Option<u64>,
}

/// One row: a message size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Bytes.
    pub size: usize,
    /// Elements.
    pub count: usize,
    /// nccl-tests type name.
    #[serde(rename = "type")]
    pub dtype: String,
    /// nccl-tests op name (`none` for unreduced collectives).
    pub redop: String,
    /// Root, -1 for unrooted collectives.
    pub root: i64,
    /// Out-of-place result.
    pub out_of_place: Cell,
    /// In-place result.
    pub in_place: Cell,
}

/// Formats `v` in at most `width` characters the way nccl-tests does.
pub fn num(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:.prec$}");
        if s.len() <= width {
            return format!("{s:>width$}");
        }
    }
    format!("{:>width$}", format!("{v:.0e}"))
}

/// The three header lines.
pub fn header() -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#{:>54}{:>36}{:>32}", "", "out-of-place", "in-place");
    let _ = writeln!(
        s,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        s,
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    s
}

fn cell(c: &Cell) -> String {
    let wrong = c.wrong.map_or_else(|| "N/A".to_owned(), |w| w.to_string());
    format!(
        "{}  {}  {}  {:>6}",
        num(c.time, 7),
        num(c.alg_bw, 6),
        num(c.bus_bw, 6),
        wrong
    )
}

/// One table line.
pub fn row(r: &Row) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        cell(&r.out_of_place),
        cell(&r.in_place)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_fit_their_columns() {
        assert_eq!(num(1.23456, 7), "   1.23");
        assert_eq!(num(123456.7, 7), " 123457");
        assert_eq!(num(12345678.0, 7), "    1e7");
        let r = Row {
            size: 8,
            count: 2,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place: Cell {
                time: 10.5,
                p50_us: 10.0,
                alg_bw: 0.0,
                bus_bw: 0.0,
                wrong: Some(0),
            },
            in_place: Cell {
                time: 9.5,
                p50_us: 9.0,
                alg_bw: 0.0,
                bus_bw: 0.0,
                wrong: None,
            },
        };
        let line = row(&r);
        assert!(
            line.starts_with("           8             2     float     sum      -1    10.50"),
            "{line}"
        );
        assert!(line.ends_with("N/A"));
    }
}
