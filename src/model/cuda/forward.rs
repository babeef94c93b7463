//! The ragged forward pass on the GPU: the CPU's forward (`cpu/forward.rs`) step for step,
//! each step one kernel over every row of every item.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::gpu::go;
use super::matmul::Scratch;
use super::model::{dev, CudaModel};
use super::plan::{blocks_for, plan_pass, PassPlan};
use super::weights::Linear;
use super::CudaError;
use crate::model::arch::Activation;
use crate::model::{batch, BatchItem, BatchOutput, ForwardOptions, ModelError};

/// Threads per row of the norm kernel (`NORM_THREADS` in norm.cu).
const NORM_THREADS: u32 = 256;

/// A pass's activations in device memory.
struct Acts {
    x: CudaSlice<f32>,     // [rows, hidden]: the residual stream
    xn: CudaSlice<f32>,    // [rows, hidden]
    fused: CudaSlice<f32>, // [rows, max(q + 2 kv, 2 ffn)]
    attn: CudaSlice<f32>,  // [rows, q_width]
    gate: CudaSlice<f32>,  // [rows, ffn]
    proj: CudaSlice<f32>,  // [rows, hidden]
    sc: Scratch,           // the mat-vecs' rounded activations
}

/// The plan's tables in device memory.
struct DevicePlan {
    tokens: CudaSlice<i32>,
    tables: CudaSlice<i32>,
    table_of_row: CudaSlice<i32>,
    slots: CudaSlice<i32>,
    positions: CudaSlice<i32>,
    info: CudaSlice<i32>,
    masks: CudaSlice<u32>,
}

fn grid_stride(n: usize) -> (u32, u32, u32) {
    (n.div_ceil(256).clamp(1, 1024) as u32, 1, 1)
}

impl CudaModel {
    /// Append each item's tokens to its sequence in one pass. A refused batch changes
    /// nothing; blocks reserved for a pass that fails on the device go back.
    pub(super) fn forward_batch(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        let limit = self.config.context_length.min(self.positions);
        let depth = batch::check(&self.config, limit, items, opts, |seq, depth| {
            let c = self.seqs.get(&seq)?;
            Some((c.len(), c.layer_lens[..depth].iter().all(|&l| l == c.len())))
        })?;
        if items.iter().all(|it| it.tokens.is_empty()) {
            // Nothing to run (and the driver refuses zero-byte buffers).
            return Ok(BatchOutput {
                vocab: self.w.lm_head.out_dim,
                hidden_dim: self.config.hidden,
                spans: vec![0..0; items.len()],
                ..BatchOutput::default()
            });
        }
        let lens: Vec<usize> = items
            .iter()
            .map(|it| self.seqs.get(&it.seq).map_or(0, |c| c.len()))
            .collect();
        self.reserve(items, &lens)?;
        // A pass writes from each sequence's length on: never into a block it shares.
        for (it, &len) in items.iter().zip(&lens) {
            if let Err(e) = self.unshare(it.seq, len) {
                for (back, &l) in items.iter().zip(&lens) {
                    if let Some(c) = self.seqs.get_mut(&back.seq) {
                        c.truncate(l, &mut self.pool);
                    }
                }
                return Err(e);
            }
        }
        let plan = {
            let blocks: Vec<&[u32]> = items
                .iter()
                .map(|it| self.seqs.get(&it.seq).map_or(&[][..], |c| &c.blocks[..]))
                .collect();
            plan_pass(items, &lens, &blocks)
        };
        let out = self.run(&plan, depth, opts);
        for (it, &len) in items.iter().zip(&lens) {
            if let Some(c) = self.seqs.get_mut(&it.seq) {
                match out {
                    Ok(_) => c.appended(depth, it.tokens.len()),
                    Err(_) => c.truncate(len, &mut self.pool),
                }
            }
        }
        out.map_err(dev)
    }

    /// Blocks for every item's new length, all or nothing.
    fn reserve(&mut self, items: &[BatchItem<'_>], lens: &[usize]) -> Result<(), ModelError> {
        for (i, (it, &len)) in items.iter().zip(lens).enumerate() {
            let ok = self
                .seqs
                .get_mut(&it.seq)
                .is_some_and(|c| c.reserve(&mut self.pool, len + it.tokens.len()));
            if !ok {
                for (back, &l) in items[..i].iter().zip(lens) {
                    if let Some(c) = self.seqs.get_mut(&back.seq) {
                        c.truncate(l, &mut self.pool);
                    }
                }
                let need: usize = items.iter().map(|it| blocks_for(it.tokens.len())).sum();
                return Err(ModelError::Device(format!(
                    "{} (about {need} more needed)",
                    CudaError::KvFull {
                        blocks: self.pool.capacity()
                    }
                )));
            }
        }
        Ok(())
    }

    fn upload(&self, p: &PassPlan) -> Result<DevicePlan, CudaError> {
        let s = &self.gpu.stream;
        let masks: &[u32] = if p.masks.is_empty() { &[0] } else { &p.masks };
        Ok(DevicePlan {
            tokens: s.clone_htod(&p.tokens)?,
            tables: s.clone_htod(&p.tables)?,
            table_of_row: s.clone_htod(&p.table_of_row)?,
            slots: s.clone_htod(&p.slots)?,
            positions: s.clone_htod(&p.positions)?,
            info: s.clone_htod(&p.info)?,
            masks: s.clone_htod(masks)?,
        })
    }

    fn acts(&self, rows: usize) -> Result<Acts, CudaError> {
        let c = &self.config;
        let q_width = c.n_heads * c.head_dim;
        let stride = q_width + 2 * c.kv_width();
        let widest = c.hidden.max(q_width).max(c.ffn);
        let s = &self.gpu.stream;
        Ok(Acts {
            x: s.alloc_zeros(rows * c.hidden)?,
            xn: s.alloc_zeros(rows * c.hidden)?,
            fused: s.alloc_zeros(rows * stride.max(2 * c.ffn))?,
            attn: s.alloc_zeros(rows * q_width)?,
            gate: s.alloc_zeros(rows * c.ffn)?,
            proj: s.alloc_zeros(rows * c.hidden)?,
            sc: Scratch::new(s, rows, widest)?,
        })
    }

    fn run(
        &self,
        plan: &PassPlan,
        depth: usize,
        opts: ForwardOptions,
    ) -> Result<BatchOutput, CudaError> {
        let rows = plan.tokens.len();
        let mut a = self.acts(rows)?;
        let d = self.upload(plan)?;
        self.embed(&d, rows, &mut a)?;
        for l in 0..depth {
            self.layer(l, &d, rows, &mut a)?;
        }
        self.head(plan, &a.x, opts)
    }

    fn embed(&self, d: &DevicePlan, rows: usize, a: &mut Acts) -> Result<(), CudaError> {
        let dim = self.config.hidden as i32;
        let scale = self.config.embed_scale().unwrap_or(1.0);
        let mut b = self.gpu.launch("embed_rows")?;
        b.arg(&self.w.embeddings)
            .arg(&d.tokens)
            .arg(&mut a.x)
            .arg(&dim)
            .arg(&scale);
        go(b, (rows as u32, 1, 1), (256, 1, 1))
    }

    /// One decoder block over all rows.
    fn layer(&self, l: usize, d: &DevicePlan, rows: usize, a: &mut Acts) -> Result<(), CudaError> {
        let c = &self.config;
        let w = &self.w.layers[l];
        let q_width = c.n_heads * c.head_dim;
        let kv_width = c.kv_width();
        let stride = q_width + 2 * kv_width;
        self.norm_rows(&a.x, &w.attn_norm, &mut a.xn, rows)?;
        self.linear(&w.qkv, Input::Xn, rows, a, Output::Fused, stride)?;
        if let Some(bias) = &w.qkv_bias {
            let (dim, n) = (stride as i32, (rows * stride) as i64);
            let mut b = self.gpu.launch("add_bias")?;
            b.arg(&mut a.fused).arg(bias).arg(&dim).arg(&n);
            go(b, grid_stride(rows * stride), (256, 1, 1))?;
        }
        if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
            self.head_norm(&mut a.fused, qn, rows, 0, c.n_heads, stride)?;
            self.head_norm(&mut a.fused, kn, rows, q_width, c.n_kv_heads, stride)?;
        }
        self.rope(l, d, &mut a.fused, rows, 0, c.n_heads, stride)?;
        self.rope(l, d, &mut a.fused, rows, q_width, c.n_kv_heads, stride)?;
        self.attend(l, d, rows, a)?;
        self.linear(&w.wo, Input::Attn, rows, a, Output::Proj, c.hidden)?;
        self.residual(w.post_attn_norm.as_ref(), rows, a)?;
        self.norm_rows(&a.x, &w.ffn_norm, &mut a.xn, rows)?;
        self.linear(&w.gate_up, Input::Xn, rows, a, Output::Fused, 2 * c.ffn)?;
        let (ffn, n) = (c.ffn as i32, (rows * c.ffn) as i64);
        let gelu = i32::from(c.arch.activation() == Activation::GeluTanh);
        let mut b = self.gpu.launch("gated")?;
        b.arg(&a.fused)
            .arg(&mut a.gate)
            .arg(&ffn)
            .arg(&n)
            .arg(&gelu)
            .arg(&self.gelu_table);
        go(b, grid_stride(rows * c.ffn), (256, 1, 1))?;
        self.linear(&w.down, Input::Gate, rows, a, Output::Proj, c.hidden)?;
        self.residual(w.post_ffn_norm.as_ref(), rows, a)
    }

    /// Append the rows' K and V to their caches, then attend (layer `l`'s part of the pool).
    fn attend(&self, l: usize, d: &DevicePlan, rows: usize, a: &mut Acts) -> Result<(), CudaError> {
        let c = &self.config;
        let q_width = c.n_heads * c.head_dim;
        let kv_width = c.kv_width();
        let at = l * self.layer_stride();
        let k = self.k_pool.slice(at..at + self.layer_stride());
        let v = self.v_pool.slice(at..at + self.layer_stride());
        let (stride, ko, vo, kw) = (
            (q_width + 2 * kv_width) as i32,
            q_width as i32,
            (q_width + kv_width) as i32,
            kv_width as i32,
        );
        let mut b = self.gpu.launch("kv_append")?;
        b.arg(&a.fused)
            .arg(&stride)
            .arg(&ko)
            .arg(&vo)
            .arg(&kw)
            .arg(&d.tables)
            .arg(&d.table_of_row)
            .arg(&d.slots)
            .arg(&k)
            .arg(&v);
        go(b, (rows as u32, 1, 1), (256, 1, 1))?;
        let (hd, nh, nkv) = (c.head_dim as i32, c.n_heads as i32, c.n_kv_heads as i32);
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let window = c.layer_window(l).map_or(0, |w| w as i32);
        let mut b = self.gpu.launch("attention")?;
        b.arg(&a.fused)
            .arg(&k)
            .arg(&v)
            .arg(&d.tables)
            .arg(&d.info)
            .arg(&d.masks)
            .arg(&mut a.attn)
            .arg(&stride)
            .arg(&hd)
            .arg(&nh)
            .arg(&nkv)
            .arg(&scale)
            .arg(&window);
        go(b, (rows as u32, c.n_heads as u32, 1), (32, 1, 1))
    }

    /// `x += proj`, with `proj` first normed where the architecture norms a block's output.
    fn residual(
        &self,
        post_norm: Option<&CudaSlice<f32>>,
        rows: usize,
        a: &mut Acts,
    ) -> Result<(), CudaError> {
        let n = (rows * self.config.hidden) as i64;
        let mut b = self.gpu.launch("add_in_place")?;
        match post_norm {
            Some(w) => {
                self.norm_rows(&a.proj, w, &mut a.xn, rows)?;
                b.arg(&mut a.x).arg(&a.xn).arg(&n);
            }
            None => {
                b.arg(&mut a.x).arg(&a.proj).arg(&n);
            }
        }
        go(b, grid_stride(n as usize), (256, 1, 1))
    }

    pub(super) fn norm_rows(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        rows: usize,
    ) -> Result<(), CudaError> {
        let (dim, eps) = (self.config.hidden as i32, self.config.rms_eps);
        let mut b = self.gpu.launch("rms_norm")?;
        b.arg(x).arg(w).arg(out).arg(&dim).arg(&eps);
        go(b, (rows as u32, 1, 1), (NORM_THREADS, 1, 1))
    }

    fn head_norm(
        &self,
        x: &mut CudaSlice<f32>,
        w: &CudaSlice<f32>,
        rows: usize,
        offset: usize,
        heads: usize,
        stride: usize,
    ) -> Result<(), CudaError> {
        let c = &self.config;
        let (st, off, hd, eps) = (stride as i32, offset as i32, c.head_dim as i32, c.rms_eps);
        let mut b = self.gpu.launch("head_rms_norm")?;
        b.arg(x).arg(w).arg(&st).arg(&off).arg(&hd).arg(&eps);
        go(b, (rows as u32, heads as u32, 1), (32, 1, 1))
    }

    #[allow(clippy::too_many_arguments)]
    fn rope(
        &self,
        l: usize,
        d: &DevicePlan,
        x: &mut CudaSlice<f32>,
        rows: usize,
        offset: usize,
        heads: usize,
        stride: usize,
    ) -> Result<(), CudaError> {
        let r = &self.ropes[self.rope_of_layer[l]];
        let c = &self.config;
        let neox = i32::from(c.arch.rope_style() == crate::model::arch::RopeStyle::Neox);
        let (st, off, hd, pairs) = (
            stride as i32,
            offset as i32,
            c.head_dim as i32,
            r.pairs as i32,
        );
        let mut b = self.gpu.launch("rope")?;
        b.arg(x)
            .arg(&d.positions)
            .arg(&r.cos)
            .arg(&r.sin)
            .arg(&st)
            .arg(&off)
            .arg(&hd)
            .arg(&pairs)
            .arg(&neox);
        go(b, (rows as u32, heads as u32, 1), (r.pairs as u32, 1, 1))
    }

    /// `y[:, offset..] = x · Wᵀ` for each part ([`CudaModel::matmul`]).
    fn linear(
        &self,
        lin: &Linear,
        input: Input,
        rows: usize,
        a: &mut Acts,
        output: Output,
        y_stride: usize,
    ) -> Result<(), CudaError> {
        let Acts {
            xn,
            attn,
            gate,
            fused,
            proj,
            sc,
            ..
        } = a;
        let x = match input {
            Input::Xn => &*xn,
            Input::Attn => &*attn,
            Input::Gate => &*gate,
        };
        let y = match output {
            Output::Fused => fused,
            Output::Proj => proj,
        };
        self.matmul(lin, x, rows, sc, y, y_stride)
    }
}

#[derive(Clone, Copy)]
enum Input {
    Xn,
    Attn,
    Gate,
}

#[derive(Clone, Copy)]
enum Output {
    Fused,
    Proj,
}
