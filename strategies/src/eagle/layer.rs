//! The EAGLE draft layer's forward on the host: rows in, normed output features and each
//! row's key and value out. Matrices are read as Q8_0 (a quarter of the f32 bytes: a draft
//! step is bound by streaming them), all of a call's rows at once.

use specgate_kernels::QuantMatrix;

use super::weights::{rms_norm, rope_angles, rope_in_place, EagleShape, EagleWeights};

/// Keys and values of draft positions, [positions, kv_dim] each.
#[derive(Debug, Clone, Default)]
pub struct KvRows {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl KvRows {
    pub fn len(&self, kv_dim: usize) -> usize {
        self.k.len() / kv_dim.max(1)
    }

    pub fn truncate(&mut self, rows: usize, kv_dim: usize) {
        self.k.truncate(rows * kv_dim);
        self.v.truncate(rows * kv_dim);
    }
}

/// One row to run: its input feature h ([hidden]), its token's embedding (None: zero), its
/// position, and which earlier entries of the call's `scratch` it attends to besides every
/// committed position and itself (a tree node: its ancestors).
pub struct LayerRow<'a> {
    pub h: &'a [f32],
    pub e: Option<&'a [f32]>,
    pub pos: usize,
    pub sees: &'a [usize],
}

/// What a call returns per row: its normed output feature and its key and value.
pub struct LayerOut {
    pub f: Vec<f32>, // [rows, hidden]
    pub kv: KvRows,  // [rows, kv_dim]
}

/// The layer, ready to draft: Q8_0 matrices (f32 where a width is not whole blocks) and f32
/// norms.
#[derive(Debug, Clone)]
pub struct EagleHead {
    pub shape: EagleShape,
    /// Softmax temperatures that calibrate the drafts' probabilities: the first draft's,
    /// then every later one's (fitted on held-out data; empty: 1). Trees rank nodes by the
    /// product of these chances; argmaxes, and so chains, do not change.
    pub temperatures: Vec<f32>,
    /// The share of held-out labels inside the draft vocabulary: a calibrated probability is
    /// a chance given that the token can be drafted at all.
    pub coverage: f32,
    mats: Vec<Matrix>,    // fc, q, k, v, o, gate, up, down
    norms: Vec<Vec<f32>>, // norm_h, norm_e, attn_norm, ffn_norm, out_norm
}

#[derive(Debug, Clone)]
enum Matrix {
    Q8(QuantMatrix),
    F32 { rows: usize, data: Vec<f32> },
}

impl Matrix {
    fn new(rows: usize, cols: usize, data: &[f32]) -> Self {
        match QuantMatrix::q8_0_from_f32(rows, cols, data) {
            Ok(q) => Matrix::Q8(q),
            Err(_) => Matrix::F32 {
                rows,
                data: data.to_vec(),
            },
        }
    }

    /// xs [n, cols] → [n, rows].
    fn mul(&self, xs: &[f32]) -> Vec<f32> {
        match self {
            Matrix::Q8(q) => q.matmul(xs),
            Matrix::F32 { rows, data } => {
                let cols = data.len() / rows;
                xs.chunks_exact(cols)
                    .flat_map(|x| {
                        data.chunks_exact(cols)
                            .map(move |w| w.iter().zip(x).map(|(a, b)| a * b).sum::<f32>())
                    })
                    .collect()
            }
        }
    }
}

const MATS: [&str; 8] = ["fc", "q", "k", "v", "o", "gate", "up", "down"];
const NORMS: [&str; 5] = ["norm_h", "norm_e", "attn_norm", "ffn_norm", "out_norm"];

impl EagleHead {
    pub fn new(w: EagleWeights) -> Self {
        let dims: std::collections::HashMap<_, _> = w.shape.tensors().into_iter().collect();
        let mats = MATS
            .iter()
            .map(|n| Matrix::new(dims[n][0], dims[n][1], w.get(n)))
            .collect();
        let norms = NORMS.iter().map(|n| w.get(n).to_vec()).collect();
        Self {
            shape: w.shape,
            temperatures: Vec::new(),
            coverage: 1.0,
            mats,
            norms,
        }
    }

    /// The `n` likeliest columns of `row` (a draft at `depth`, 1 for the first) with their
    /// calibrated chances.
    pub fn chances(&self, depth: usize, row: &[f32], n: usize) -> Vec<(u32, f32)> {
        let i = depth
            .saturating_sub(1)
            .min(self.temperatures.len().saturating_sub(1));
        let t = self.temperatures.get(i).copied().unwrap_or(1.0);
        crate::top_n::top_n_at(row, n, t)
            .into_iter()
            .map(|(c, p)| (c, p * self.coverage))
            .collect()
    }

    fn mat(&self, name: &str) -> &Matrix {
        &self.mats[MATS.iter().position(|n| *n == name).unwrap_or(0)]
    }

    fn norm(&self, name: &str) -> &[f32] {
        &self.norms[NORMS.iter().position(|n| *n == name).unwrap_or(0)]
    }

    /// Run `rows`: each attends to every position of `cache`, to the entries of `scratch` it
    /// names, to the rows of this call before it when `causal`, and to itself.
    pub fn forward(
        &self,
        rows: &[LayerRow<'_>],
        cache: &KvRows,
        scratch: &KvRows,
        causal: bool,
    ) -> LayerOut {
        let s = &self.shape;
        let (d, eps) = (s.hidden, s.rms_eps);
        let zero = vec![0.0; d];
        let mut input = Vec::with_capacity(rows.len() * 2 * d);
        for r in rows {
            input.extend(rms_norm(r.h, self.norm("norm_h"), eps));
            input.extend(rms_norm(r.e.unwrap_or(&zero), self.norm("norm_e"), eps));
        }
        let mut x = self.mat("fc").mul(&input);
        let a: Vec<f32> = x
            .chunks_exact(d)
            .flat_map(|x| rms_norm(x, self.norm("attn_norm"), eps))
            .collect();
        let mut q = self.mat("q").mul(&a);
        let mut k = self.mat("k").mul(&a);
        let v = self.mat("v").mul(&a);
        let (qd, kd) = (s.q_dim(), s.kv_dim());
        for (i, r) in rows.iter().enumerate() {
            let (cos, sin) = rope_angles(r.pos, s.head_dim, s.rope_base);
            rope_in_place(&mut q[i * qd..(i + 1) * qd], s.head_dim, &cos, &sin);
            rope_in_place(&mut k[i * kd..(i + 1) * kd], s.head_dim, &cos, &sin);
        }
        let own = KvRows { k, v };
        let mut att = vec![0.0; rows.len() * qd];
        for (i, r) in rows.iter().enumerate() {
            let earlier: Vec<usize> = if causal { (0..i).collect() } else { Vec::new() };
            let keys = Keys {
                cache,
                scratch,
                sees: r.sees,
                own: &own,
                earlier: &earlier,
                me: i,
            };
            self.attend(
                &q[i * qd..(i + 1) * qd],
                &keys,
                &mut att[i * qd..(i + 1) * qd],
            );
        }
        let o = self.mat("o").mul(&att);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let m: Vec<f32> = x
            .chunks_exact(d)
            .flat_map(|x| rms_norm(x, self.norm("ffn_norm"), eps))
            .collect();
        let g = self.mat("gate").mul(&m);
        let u = self.mat("up").mul(&m);
        let gu: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let down = self.mat("down").mul(&gu);
        x.iter_mut().zip(&down).for_each(|(x, y)| *x += y);
        let f = x
            .chunks_exact(d)
            .flat_map(|x| rms_norm(x, self.norm("out_norm"), eps))
            .collect();
        LayerOut { f, kv: own }
    }

    /// Softmax attention of one row's query over the keys it sees, per head (grouped keys).
    fn attend(&self, q: &[f32], keys: &Keys<'_>, out: &mut [f32]) {
        let s = &self.shape;
        let (hd, kd) = (s.head_dim, s.kv_dim());
        let scale = 1.0 / (hd as f32).sqrt();
        let group = s.heads / s.kv_heads;
        let rows: Vec<(&[f32], &[f32])> = keys.rows(kd).collect();
        let mut w = vec![0.0f32; rows.len()];
        for h in 0..s.heads {
            let kvh = h / group;
            let qh = &q[h * hd..(h + 1) * hd];
            for (w, (k, _)) in w.iter_mut().zip(&rows) {
                let kh = &k[kvh * hd..(kvh + 1) * hd];
                *w = qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() * scale;
            }
            let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for w in w.iter_mut() {
                *w = (*w - max).exp();
                sum += *w;
            }
            let oh = &mut out[h * hd..(h + 1) * hd];
            for (w, (_, v)) in w.iter().zip(&rows) {
                let vh = &v[kvh * hd..(kvh + 1) * hd];
                for (o, v) in oh.iter_mut().zip(vh) {
                    *o += w / sum * v;
                }
            }
        }
    }
}

/// The keys and values one row attends to, in position order: the committed cache, the
/// scratch entries it names, the call's earlier rows (causal), itself.
struct Keys<'a> {
    cache: &'a KvRows,
    scratch: &'a KvRows,
    sees: &'a [usize],
    own: &'a KvRows,
    earlier: &'a [usize],
    me: usize,
}

impl<'a> Keys<'a> {
    fn rows(&self, kd: usize) -> impl Iterator<Item = (&'a [f32], &'a [f32])> + '_ {
        let at = move |kv: &'a KvRows, i: usize| {
            (&kv.k[i * kd..(i + 1) * kd], &kv.v[i * kd..(i + 1) * kd])
        };
        (0..self.cache.len(kd))
            .map(move |i| at(self.cache, i))
            .chain(self.sees.iter().map(move |&i| at(self.scratch, i)))
            .chain(self.earlier.iter().map(move |&i| at(self.own, i)))
            .chain(std::iter::once(at(self.own, self.me)))
    }
}
