//! Many query heads over one KV head in one call: the rows of a verify pass, and the query
//! heads of their group, all see the positions cached before the pass. Each block of those
//! keys and values is widened once into a buffer that stays in L1 and read there by every
//! query, instead of every query streaming the whole head from L2 (and the head being widened
//! per call). Per score and per output element the operations are exactly [`attend`]'s, in
//! the same order, so the bits are the same as one query at a time.

use super::*;

/// Reusable buffers for [`attend_rows`] (one per thread; nothing is allocated once warm).
#[derive(Debug, Default)]
pub struct RowsScratch {
    q16: Vec<f32>,
    /// Every query's own positions, back to back; `ends[i]` closes query i's.
    tails: Vec<usize>,
    ends: Vec<usize>,
    /// [queries][stride]: query i's scores, then its softmax weights.
    scores: Vec<f32>,
    /// One widened block of keys or values.
    block: Vec<f32>,
    single: AttnScratch,
}

/// Positions per widened block of values (16 × 64 f32: 4 KiB, well inside L1).
const VALUE_BLOCK: usize = 16;

/// Attention of the queries `q` ([queries][hd], one head each) over one KV head: query i sees
/// positions `0..shared`, then `tail(i)` (at least one position in all). `out`: [queries][hd].
/// Each query's result is [`attend`]'s for that query alone, bit for bit, on every path.
#[allow(clippy::too_many_arguments)]
pub fn attend_rows<T: KvElem, I: Iterator<Item = usize>>(
    q: &[f32],
    hd: usize,
    kv: KvHead<'_, T>,
    shared: usize,
    tail: impl Fn(usize) -> I,
    scale: f32,
    scratch: &mut RowsScratch,
    out: &mut [f32],
    path: AttnPath,
) {
    let simd = cfg!(target_arch = "x86_64") && path != AttnPath::Portable;
    if !simd || !hd.is_multiple_of(8) {
        for (i, (qi, o)) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)).enumerate() {
            let seen = (0..shared).chain(tail(i));
            attend_with(qi, 1, kv, seen, scale, &mut scratch.single, o, path);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every path but Portable runs with AVX2, FMA and F16C, and Avx512 with AVX-512F
    // too; hd is a whole number of 8-lane chunks; positions index the cache.
    unsafe {
        blocked(q, hd, kv, shared, tail, scale, scratch, out, path)
    };
}

/// [`attend_rows`] on the SIMD path: shared keys in blocks of 8 for every query, then each
/// query's own keys; softmax per query; shared values in blocks for every query, then each
/// query's own values (so each output element still adds its positions in order).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocked<T: KvElem, I: Iterator<Item = usize>>(
    q: &[f32],
    hd: usize,
    kv: KvHead<'_, T>,
    shared: usize,
    tail: impl Fn(usize) -> I,
    scale: f32,
    s: &mut RowsScratch,
    out: &mut [f32],
    path: AttnPath,
) {
    let queries = q.len() / hd;
    // AVX-512 kernels for the usual head width: same bits, half the multiply-adds.
    let wide = path == AttnPath::Avx512 && hd == x86_512::HEAD;
    x86::round_f16_into(q, &mut s.q16);
    s.tails.clear();
    s.ends.clear();
    for i in 0..queries {
        s.tails.extend(tail(i));
        s.ends.push(s.tails.len());
    }
    let own = |ends: &[usize], i: usize| (if i == 0 { 0 } else { ends[i - 1] })..ends[i];
    let stride = shared
        + (0..queries)
            .map(|i| own(&s.ends, i).len())
            .max()
            .unwrap_or(0);
    s.scores.clear();
    s.scores.resize(queries * stride, 0.0);
    s.block.resize(VALUE_BLOCK.max(8) * hd, 0.0);

    let keys = kv.keys.as_ptr().add(kv.offset);
    for first in (0..shared).step_by(8) {
        let n = (shared - first).min(8);
        if wide {
            x86_512::widen_key_pairs(keys, kv.stride, (first, n), &mut s.block);
            x86_512::block_scores(&s.q16, &s.block, n, &mut s.scores, (stride, first));
            continue;
        }
        x86::widen_block(keys, kv.stride, (first, n, hd), &mut s.block);
        x86::block_scores(&s.q16, &s.block, (hd, n), &mut s.scores, (stride, first));
    }
    for i in 0..queries {
        let (mine, row) = (&s.tails[own(&s.ends, i)], &mut s.scores[i * stride..]);
        x86::scores(
            &s.q16[i * hd..][..hd],
            &kv,
            mine,
            &mut row[shared..][..mine.len()],
        );
        softmax_f16(&mut row[..shared + mine.len()], scale, true);
    }

    out.fill(0.0);
    let values = kv.values.as_ptr().add(kv.offset);
    for first in (0..shared).step_by(VALUE_BLOCK) {
        let n = (shared - first).min(VALUE_BLOCK);
        x86::widen_block(values, kv.stride, (first, n, hd), &mut s.block);
        if wide {
            x86_512::block_values(&s.block, n, &s.scores, (stride, first), out);
            continue;
        }
        x86::block_values(&s.block, (hd, n), &s.scores, (stride, first), out);
    }
    for (i, o) in out.chunks_exact_mut(hd).enumerate() {
        let mine = &s.tails[own(&s.ends, i)];
        let w = &s.scores[i * stride + shared..][..mine.len()];
        x86::accumulate_values(&kv, mine, w, o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn many_queries_at_once_equal_each_query_alone_on_every_path() {
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        for (hd, queries) in [
            (64, 1),
            (64, 3),
            (64, 12),
            (128, 5),
            (8, 4),
            (40, 3),
            (24, 2),
        ] {
            let stride = 3 * hd;
            let len = 45;
            let mut cache = || -> Vec<f16> {
                (0..len * stride)
                    .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                    .collect()
            };
            let (keys, values) = (cache(), cache());
            let kv = KvHead {
                keys: &keys,
                values: &values,
                stride,
                offset: 2 * hd,
            };
            let q: Vec<f32> = (0..queries * hd)
                .map(|_| rng.random_range(-3.0f32..3.0))
                .collect();
            // Shared prefixes that are and are not whole blocks, and no prefix at all; each
            // query sees a causal or a tree-like tail of its own.
            for shared in [0, 1, 7, 8, 16, 17, 33, 40] {
                let tail = |i: usize| -> Vec<usize> {
                    match i % 3 {
                        0 => (shared..shared + 1 + i % 5).collect(),
                        1 => [shared, shared + 2, len - 1].into(),
                        _ => vec![len - 1 - i % 4],
                    }
                };
                let case = format!("head {hd}, {queries} queries, shared {shared}");
                let mut want = vec![0.0f32; q.len()];
                let mut single = AttnScratch::default();
                for (i, (qi, o)) in q
                    .chunks_exact(hd)
                    .zip(want.chunks_exact_mut(hd))
                    .enumerate()
                {
                    let seen = (0..shared).chain(tail(i));
                    attend_with(qi, 1, kv, seen, 0.3, &mut single, o, AttnPath::Portable);
                }
                let mut scratch = RowsScratch::default();
                for path in AttnPath::available() {
                    let mut got = vec![f32::NAN; q.len()];
                    let t = |i: usize| tail(i).into_iter();
                    attend_rows(&q, hd, kv, shared, t, 0.3, &mut scratch, &mut got, path);
                    assert_eq!(got, want, "{case}: {path:?}");
                }
            }
        }
    }
}
