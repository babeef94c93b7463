//! Causal and tree attention of new query rows over one sequence's cache, with grouped KV
//! heads: which positions each (row, head) sees, and which thread runs it. The arithmetic
//! (llama.cpp's f16 rounding, SIMD, the same bits for any batching) is
//! `specgate_kernels::attention`.

use half::f16;
use specgate_kernels::attention::{
    attend, attend_rows, AttnPath, AttnScratch, KvHead, RowsScratch,
};
use specgate_kernels::pool::SpinPool;

/// Shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// A sliding-window layer's window: a query at position p sees keys p − window + 1..=p
    /// (llama.cpp masks p − k ≥ window). None: every earlier position.
    pub window: Option<usize>,
}

impl AttnShape {
    /// Query heads per KV head; they sit next to each other in a row's query.
    fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Values per position of a layer's keys (all KV heads).
    fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// The first cache position a query at position `pos` sees.
    fn first_seen(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }

    /// KV head `kh` read in place, as f16.
    fn in_place<'a>(&self, cache: (&'a [f16], &'a [f16]), kh: usize) -> KvHead<'a, f16> {
        KvHead {
            keys: cache.0,
            values: cache.1,
            stride: self.n_kv_heads * self.head_dim,
            offset: kh * self.head_dim,
        }
    }
}

/// The query rows of a call: row r's query heads are `rows[r * stride..][..n_heads *
/// head_dim]` (the fused Q/K/V product, read in place).
#[derive(Debug, Clone, Copy)]
pub struct QueryRows<'a> {
    pub rows: &'a [f32],
    pub stride: usize,
}

impl QueryRows<'_> {
    fn len(&self) -> usize {
        self.rows.len() / self.stride
    }

    /// KV head `kh`'s group of query heads (`width` values) in row `r`.
    fn group(&self, r: usize, kh: usize, width: usize) -> &[f32] {
        &self.rows[r * self.stride + kh * width..][..width]
    }
}

/// Rows per attention task: a task's query heads share every block of cached keys and values
/// it reads (`attend_rows`). Smaller chunks balance two threads better but read the cache
/// once per chunk: in perf samples, attention cost less at 2 and 4 rows with one chunk of
/// 4 than with two chunks per KV head.
const ROWS_PER_TASK: usize = 4;

/// Attention for `rows` new tokens whose keys and values are already the last `rows` entries
/// of the cache. Query row i sits at position `cache_len - rows + i` and sees positions
/// `0..=cache_len - rows + i`.
/// `keys`, `values`: [cache_len, n_kv_heads * head_dim]; `out`: [rows, n_heads * head_dim].
pub fn causal_attention(
    shape: AttnShape,
    q: QueryRows<'_>,
    keys: &[f16],
    values: &[f16],
    out: &mut [f32],
) {
    let prefix = keys.len() / shape.kv_width() - q.len();
    let own = |r: usize| prefix..prefix + r + 1;
    let first = |r: usize| shape.first_seen(prefix + r);
    run_tasks(shape, q, (keys, values), out, prefix, &own, &first);
}

/// Attention for the rows of a verified tree, whose keys and values are the last `rows`
/// entries of the cache: row i sees the `cache_len - rows` earlier positions and the pass's
/// own rows `visible[i]` (itself, its ancestors, the pending token); row i's position is
/// `cache_len - rows + depth[i]`. Shapes as [`causal_attention`].
pub fn tree_attention(
    shape: AttnShape,
    q: QueryRows<'_>,
    (keys, values): (&[f16], &[f16]),
    visible: &[Vec<usize>],
    depth: &[usize],
    out: &mut [f32],
) {
    let prefix = keys.len() / shape.kv_width() - q.len();
    let own = |r: usize| visible[r].iter().map(move |&v| prefix + v);
    let first = |r: usize| shape.first_seen(prefix + depth[r]);
    run_tasks(shape, q, (keys, values), out, prefix, &own, &first);
}

/// Row r sees the positions `first(r)..prefix`, then those of `own(r)` from `first(r)` on.
/// One row (a decode step): a task per KV head, each query head reading the f16 cache in
/// place. Several rows: a task per (KV head, chunk of rows), whose query heads share each
/// widened block of the cache — or, where a window hides part of the prefix, attend row by
/// row (the same bits: a row's result never depends on the rows beside it).
fn run_tasks<I: Iterator<Item = usize>>(
    shape: AttnShape,
    q: QueryRows<'_>,
    (keys, values): (&[f16], &[f16]),
    out: &mut [f32],
    prefix: usize,
    own: &(dyn Fn(usize) -> I + Sync),
    first: &(dyn Fn(usize) -> usize + Sync),
) {
    let (n_heads, head_dim, n_kv) = (shape.n_heads, shape.head_dim, shape.n_kv_heads);
    let q_width = n_heads * head_dim;
    let rows = q.len();
    let (group, scale) = (shape.group(), shape.scale());
    let width = group * head_dim;
    let chunks = rows.div_ceil(ROWS_PER_TASK);
    let windowed = (0..rows).any(|r| first(r) > 0);
    let dst = SharedRows(out.as_mut_ptr(), out.len());
    let task = |s: &mut TaskScratch, job: usize| {
        let (kh, c) = (job / chunks, job % chunks);
        let row0 = c * ROWS_PER_TASK;
        let row_end = (row0 + ROWS_PER_TASK).min(rows);
        let kv = shape.in_place((keys, values), kh);
        let seen = |r: usize| {
            let lo = first(r);
            (lo..prefix).chain(own(r).filter(move |&p| p >= lo))
        };
        if rows == 1 || windowed {
            for r in row0..row_end {
                // SAFETY: jobs are distinct (KV head, row chunk) pairs, so each writes its
                // own [r * q_width + kh * width, +width) range of `out`.
                let o = unsafe { dst.slice(r * q_width + kh * width, width) };
                attend(
                    q.group(r, kh, width),
                    group,
                    kv,
                    seen(r),
                    scale,
                    &mut s.single,
                    o,
                );
            }
            return;
        }
        s.queries.clear();
        (row0..row_end).for_each(|r| s.queries.extend_from_slice(q.group(r, kh, width)));
        s.out.resize(s.queries.len(), 0.0);
        let own_of = |i: usize| own(row0 + i / group);
        let path = AttnPath::detect();
        let (qs, o) = (&s.queries, &mut s.out);
        attend_rows(
            qs,
            head_dim,
            kv,
            prefix,
            own_of,
            scale,
            &mut s.rows,
            o,
            path,
        );
        for (r, o) in (row0..row_end).zip(s.out.chunks_exact(width)) {
            // SAFETY: jobs are distinct (KV head, row chunk) pairs, so each writes its own
            // disjoint [r * q_width + kh * width, +width) range of `out`.
            unsafe { dst.slice(r * q_width + kh * width, width) }.copy_from_slice(o);
        }
    };
    let jobs = n_kv * chunks;
    if rows * n_heads * (prefix + rows) < PARALLEL_MIN_SCORES {
        SCRATCH.with_borrow_mut(|s| (0..jobs).for_each(|j| task(s, j)));
    } else {
        SpinPool::global().for_each(jobs, &|j| SCRATCH.with_borrow_mut(|s| task(s, j)));
    }
}

/// A thread's attention buffers, kept between calls (no allocation once warm).
#[derive(Default)]
struct TaskScratch {
    single: AttnScratch,
    rows: RowsScratch,
    /// A chunk's query heads, gathered ([queries][head_dim]), and their outputs.
    queries: Vec<f32>,
    out: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<TaskScratch> = Default::default();
}

/// The output of an attention call, written by every task at its own (row, KV head) ranges.
struct SharedRows(*mut f32, usize);

// SAFETY: tasks only write disjoint ranges through it (see `run_tasks`).
unsafe impl Sync for SharedRows {}

impl SharedRows {
    /// # Safety
    /// No other live slice may overlap `at..at + len`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [f32] {
        assert!(at + len <= self.1, "attention output range");
        std::slice::from_raw_parts_mut(self.0.add(at), len)
    }
}

/// Below this many query-key scores per call, attention runs on the calling thread. Low:
/// one decode row over a few hundred cached positions is memory-bound, and two threads
/// read the cache faster (one token after 300: 5.7 → 4.9 ms).
const PARALLEL_MIN_SCORES: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of two heads of width 2.
    fn qr(q: &[f32]) -> QueryRows<'_> {
        QueryRows { rows: q, stride: 4 }
    }

    #[test]
    fn single_key_returns_its_value_and_mask_hides_the_future() {
        let shape = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            window: None,
        };
        let h = |xs: [f32; 4]| xs.map(f16::from_f32);
        let keys = h([1.0, 0.0, 0.0, 1.0]);
        let values = h([10.0, 20.0, 30.0, 40.0]);
        let q = [1.0, 0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 5.0]; // 2 rows, 2 heads
        let mut out = [0.0f32; 8];
        causal_attention(shape, qr(&q), &keys, &values, &mut out);
        // Row 0 sees only position 0: both heads return value 0 exactly.
        assert_eq!(&out[..4], &[10.0, 20.0, 10.0, 20.0]);
        // Row 1 sees both positions; its weights favour neither more than softmax says.
        let w0 = 1.0 / (1.0 + (5.0f32 / 2f32.sqrt()).exp()); // head 0: scores 5/√2, 0
        let expect = w0 * 30.0 + (1.0 - w0) * 10.0;
        assert!((out[4] - expect).abs() < 1e-2, "{} vs {expect}", out[4]);
    }

    #[test]
    fn tree_attention_sees_exactly_the_visible_rows() {
        let shape = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            window: None,
        };
        let keys: Vec<f16> = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 1.0, 1.0, 0.2, 0.3]
            .map(f16::from_f32)
            .to_vec(); // 5 positions: 2 cached, 3 new
        let values: Vec<f16> = (0..10).map(|x| f16::from_f32(x as f32)).collect();
        let q: Vec<f32> = (0..12).map(|x| (x as f32 * 0.37).sin()).collect(); // 3 rows
                                                                              // A chain is causal attention.
        let chain = vec![vec![0], vec![0, 1], vec![0, 1, 2]];
        let (mut a, mut b) = (vec![0.0f32; 12], vec![0.0f32; 12]);
        tree_attention(shape, qr(&q), (&keys, &values), &chain, &[0, 1, 2], &mut a);
        causal_attention(shape, qr(&q), &keys, &values, &mut b);
        assert_eq!(a, b);
        // A branch: row 2 hangs under row 0, so it must not see row 1 — the same as causal
        // attention over a cache that never held row 1.
        let branch = vec![vec![0], vec![0, 1], vec![0, 2]];
        tree_attention(shape, qr(&q), (&keys, &values), &branch, &[0, 1, 1], &mut a);
        let drop = |xs: &[f16]| [&xs[..6], &xs[8..]].concat();
        let mut c = vec![0.0f32; 8];
        let q2 = [&q[..4], &q[8..]].concat();
        causal_attention(shape, qr(&q2), &drop(&keys), &drop(&values), &mut c);
        assert_eq!(&a[8..], &c[4..]);
        assert_eq!(&a[..4], &c[..4]);
    }

    /// A window of w: a row sees only its last w positions, the same as attention over a
    /// cache that starts there; a single decode row and a prefill row agree.
    #[test]
    fn a_window_hides_positions_w_or_more_back() {
        let wide = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            window: None,
        };
        let windowed = AttnShape {
            window: Some(2),
            ..wide
        };
        let keys: Vec<f16> = (0..10)
            .map(|x| f16::from_f32((x as f32 * 0.7).cos()))
            .collect();
        let values: Vec<f16> = (0..10).map(|x| f16::from_f32(x as f32)).collect();
        let q: Vec<f32> = (0..20).map(|x| (x as f32 * 0.37).sin()).collect(); // 5 rows
        let mut all = vec![0.0f32; 20];
        causal_attention(windowed, qr(&q), &keys, &values, &mut all);
        for r in 0..5usize {
            // Row r (position r) sees positions r - 1 and r only.
            let lo = r.saturating_sub(1);
            let (k, v) = (&keys[2 * lo..2 * (r + 1)], &values[2 * lo..2 * (r + 1)]);
            let mut one = vec![0.0f32; 4];
            causal_attention(wide, qr(&q[4 * r..4 * (r + 1)]), k, v, &mut one);
            assert_eq!(&all[4 * r..4 * (r + 1)], &one[..], "row {r}");
        }
    }
}
