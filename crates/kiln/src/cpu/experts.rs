//! The CPU half of `expert_groups`: a stable counting sort of the slots by expert.

/// For the experts `idx` of `n = T·k` slots (checked against `num_experts`): the token of
/// each sorted row, each slot's sorted row, and each expert's end row.
pub(crate) fn expert_groups(idx: &[usize], k: usize, num_experts: usize) -> (Vec<i64>, Vec<i64>, Vec<i32>) {
    let n = idx.len();
    let mut next = vec![0usize; num_experts + 1];
    for &e in idx {
        next[e + 1] += 1;
    }
    for e in 0..num_experts {
        next[e + 1] += next[e];
    }
    let ends: Vec<i32> = next[1..].iter().map(|&v| v as i32).collect();
    let (mut rows, mut slot_rows) = (vec![0i64; n], vec![0i64; n]);
    for (s, &e) in idx.iter().enumerate() {
        let p = next[e];
        next[e] += 1;
        rows[p] = (s / k) as i64;
        slot_rows[s] = p as i64;
    }
    (rows, slot_rows, ends)
}
