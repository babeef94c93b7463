//! The end of a pass on the GPU: the rows that asked for logits picked out, the final norm,
//! the LM head, and only those rows' logits (and hidden states, when asked) copied back.

use super::gpu::go;
use super::matmul::Scratch;
use super::model::CudaModel;
use super::plan::PassPlan;
use super::CudaError;
use crate::model::{BatchOutput, ForwardOptions};
use cudarc::driver::PushKernelArg;

impl CudaModel {
    /// Final norm and LM head over the plan's logit rows of `x` ([rows, hidden]).
    pub(super) fn head(
        &self,
        plan: &PassPlan,
        x: &cudarc::driver::CudaSlice<f32>,
        opts: ForwardOptions,
    ) -> Result<BatchOutput, CudaError> {
        let hidden = self.config.hidden;
        let vocab = self.w.lm_head.out_dim;
        let n = plan.logit_rows.len();
        let mut out = BatchOutput {
            vocab,
            hidden_dim: hidden,
            logits: Vec::new(),
            hidden: Vec::new(),
            spans: plan.spans.clone(),
        };
        if n == 0 {
            // Nothing comes back to wait on: wait here, so a kernel's fault is this pass's
            // error, not the next one's.
            self.gpu.stream.synchronize()?;
            return Ok(out);
        }
        let s = &self.gpu.stream;
        let idx = s.clone_htod(&plan.logit_rows)?;
        let mut picked = s.alloc_zeros::<f32>(n * hidden)?;
        let dim = hidden as i32;
        let mut b = self.gpu.launch("gather_rows")?;
        b.arg(x).arg(&idx).arg(&mut picked).arg(&dim);
        go(b, (n as u32, 1, 1), (256, 1, 1))?;
        let mut normed = s.alloc_zeros::<f32>(n * hidden)?;
        self.norm_rows(&picked, &self.w.output_norm, &mut normed, n)?;
        let mut sc = Scratch::new(s, n, hidden)?;
        let mut logits = s.alloc_zeros::<f32>(n * vocab)?;
        self.matmul(&self.w.lm_head, &normed, n, &mut sc, &mut logits, vocab)?;
        out.logits = s.clone_dtoh(&logits)?;
        if opts.hidden {
            out.hidden = s.clone_dtoh(&normed)?;
        }
        Ok(out)
    }
}
