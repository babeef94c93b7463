//! The prefix cache's side of the CUDA pool: a writer's own copy of a shared block before it
//! writes, and the blocks only the cache holds.

use super::model::CudaModel;
use super::plan::KV_BLOCK;
use super::CudaError;
use crate::model::{ModelError, SeqId};

impl CudaModel {
    /// Give `seq` its own copy of every shared block it is about to write from position
    /// `from` on; nothing changes when the pool is short.
    pub(super) fn unshare(&mut self, seq: SeqId, from: usize) -> Result<(), ModelError> {
        let cache = self
            .seqs
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        let copies = cache.unshare_from(from, &mut self.pool).ok_or_else(|| {
            ModelError::Device(
                CudaError::KvFull {
                    blocks: self.pool.capacity(),
                }
                .to_string(),
            )
        })?;
        if copies.is_empty() {
            return Ok(());
        }
        let block = KV_BLOCK * self.config.kv_width();
        let stride = self.layer_stride();
        // Through a scratch buffer: one slice cannot lend a view and a mutable one at once.
        let mut tmp = self.gpu.stream.alloc_zeros::<u16>(block)?;
        for (src, dst) in copies {
            for layer in 0..self.config.n_layers {
                let (s, d) = (
                    layer * stride + src as usize * block,
                    layer * stride + dst as usize * block,
                );
                for pool in [&mut self.k_pool, &mut self.v_pool] {
                    self.gpu
                        .stream
                        .memcpy_dtod(&pool.slice(s..s + block), &mut tmp)?;
                    self.gpu
                        .stream
                        .memcpy_dtod(&tmp, &mut pool.slice_mut(d..d + block))?;
                }
            }
        }
        Ok(())
    }

    /// Pool blocks held by the prefix cache alone (no sequence holds them).
    pub(super) fn cache_only_blocks(&self) -> usize {
        self.stored
            .values()
            .filter(|&&b| self.pool.holders(b) == 1)
            .count()
    }
}
