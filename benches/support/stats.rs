#![allow(dead_code)] // shared by several benches, each using a part
//! The benches' medians and the lists of figures they print.

/// The median of `v` (the upper one of an even count; 0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// `v` in the order measured, each with `decimals` decimals, separated by spaces: the
/// rounds behind a printed median.
pub fn joined(v: &[f64], decimals: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.decimals$}"))
        .collect::<Vec<_>>()
        .join(" ")
}
