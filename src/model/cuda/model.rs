//! `CudaModel`: the target on one GPU, behind [`TargetBackend`].

use std::collections::HashMap;
use std::path::Path;

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::f16;

use super::gpu::{go, Gpu};
use super::plan::{BlockPool, SeqCache, KV_BLOCK};
use super::weights::{self, CudaLoadError, Weights};
use super::CudaError;
use crate::model::cpu::layer_ropes;
use crate::model::{
    BatchItem, BatchOutput, ForwardOptions, GgufMetadata, KvLayer, ModelConfig, ModelError, SeqId,
    TargetBackend,
};
use crate::prefix::BlockId;

/// The widest head the attention kernel holds (`MAX_HEAD_DIM` in attention.cu).
const MAX_HEAD_DIM: usize = 256;

/// Default ceiling of the KV pool (`SPECGATE_CUDA_KV_GIB` sets another); at most half the
/// device's free memory is taken.
const DEFAULT_KV_GIB: f64 = 8.0;

/// One rotary table on the device ([positions, pairs] cos and sin, the CPU's own angles).
pub(super) struct DeviceRope {
    pub cos: CudaSlice<f32>,
    pub sin: CudaSlice<f32>,
    pub pairs: usize,
}

pub struct CudaModel {
    pub(super) config: ModelConfig,
    pub(super) gpu: Gpu,
    pub(super) w: Weights,
    pub(super) ropes: Vec<DeviceRope>,
    pub(super) rope_of_layer: Vec<usize>,
    pub(super) positions: usize,
    pub(super) pool: BlockPool,
    pub(super) seqs: HashMap<SeqId, SeqCache>,
    /// Prefix-cache blocks: pool blocks the cache holds (shared with sequences, never
    /// written while shared: a writer moves to a copy first).
    pub(super) stored: HashMap<BlockId, u32>,
    /// Keys and values of every layer: [layers, blocks, KV_BLOCK, kv_width] f16 bits.
    pub(super) k_pool: CudaSlice<u16>,
    pub(super) v_pool: CudaSlice<u16>,
    /// The CPU's f16 table of GELU (Gemma's GEGLU), so both devices look up the same values.
    pub(super) gelu_table: CudaSlice<u16>,
    next_seq: u64,
}

pub(super) fn dev(e: CudaError) -> ModelError {
    ModelError::Device(e.to_string())
}

impl From<cudarc::driver::DriverError> for ModelError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        ModelError::Device(e.to_string())
    }
}

impl CudaModel {
    /// Open GPU `ordinal`, compile the kernels for it and upload the model at `path`.
    pub fn load(ordinal: usize, path: &Path) -> Result<(Self, GgufMetadata), CudaLoadError> {
        let gpu = Gpu::open(ordinal)?;
        let loaded = weights::load(&gpu, path)?;
        let config = loaded.config;
        if config.head_dim > MAX_HEAD_DIM {
            return Err(ModelError::Unsupported(format!(
                "a head width of {} on CUDA (the attention kernel holds up to {MAX_HEAD_DIM})",
                config.head_dim
            ))
            .into());
        }
        let (host_ropes, rope_of_layer) =
            layer_ropes(&config, loaded.weights.rope_freqs.as_deref());
        let positions = host_ropes.iter().map(|r| r.positions()).min().unwrap_or(0);
        let mut ropes = Vec::with_capacity(host_ropes.len());
        for r in &host_ropes {
            let (cos, sin) = r.tables();
            ropes.push(DeviceRope {
                cos: gpu.stream.clone_htod(cos).map_err(CudaError::from)?,
                sin: gpu.stream.clone_htod(sin).map_err(CudaError::from)?,
                pairs: r.pairs(),
            });
        }
        let block_bytes = block_bytes(&config);
        let blocks = kv_blocks(&gpu, block_bytes)?;
        let pool_len = config.n_layers * blocks * KV_BLOCK * config.kv_width();
        let k_pool = gpu
            .stream
            .alloc_zeros::<u16>(pool_len)
            .map_err(CudaError::from)?;
        let v_pool = gpu
            .stream
            .alloc_zeros::<u16>(pool_len)
            .map_err(CudaError::from)?;
        let gelu_table = gpu
            .stream
            .clone_htod(specgate_kernels::gelu::table())
            .map_err(CudaError::from)?;
        eprintln!(
            "specgate: target on {}: weights {} MiB, KV pool {} blocks ({} tokens)",
            gpu.name,
            loaded.weights.bytes >> 20,
            blocks,
            blocks * KV_BLOCK
        );
        let model = Self {
            config,
            gpu,
            w: loaded.weights,
            ropes,
            rope_of_layer,
            positions,
            pool: BlockPool::new(blocks),
            seqs: HashMap::new(),
            stored: HashMap::new(),
            k_pool,
            v_pool,
            gelu_table,
            next_seq: 0,
        };
        Ok((model, loaded.metadata))
    }

    /// Elements of one layer of the pool.
    pub(super) fn layer_stride(&self) -> usize {
        self.pool.capacity() * KV_BLOCK * self.config.kv_width()
    }

    fn seq(&self, seq: SeqId) -> Result<&SeqCache, ModelError> {
        self.seqs.get(&seq).ok_or(ModelError::UnknownSequence(seq))
    }
}

/// Device bytes of one block in every layer, keys and values.
fn block_bytes(config: &ModelConfig) -> usize {
    config.n_layers * KV_BLOCK * config.kv_width() * 2 * std::mem::size_of::<u16>()
}

/// Blocks the pool gets: `SPECGATE_CUDA_KV_GIB` (default 8) or half the free memory, less.
fn kv_blocks(gpu: &Gpu, block_bytes: usize) -> Result<usize, CudaError> {
    let gib = std::env::var("SPECGATE_CUDA_KV_GIB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|g| *g > 0.0)
        .unwrap_or(DEFAULT_KV_GIB);
    let (free, _) = gpu.memory()?;
    let budget = ((gib * (1u64 << 30) as f64) as usize).min(free / 2);
    let blocks = budget / block_bytes.max(1);
    if blocks == 0 {
        return Err(CudaError::KvFull { blocks: 0 });
    }
    Ok(blocks)
}

impl TargetBackend for CudaModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn device(&self) -> String {
        self.gpu.name.clone()
    }

    fn new_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        self.seqs.insert(id, SeqCache::new(self.config.n_layers));
        id
    }

    fn seq_len(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(SeqCache::len)
    }

    fn forward(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        self.forward_batch(items, opts)
    }

    fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError> {
        let cache = self
            .seqs
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        cache.truncate(len, &mut self.pool);
        Ok(())
    }

    fn keep_rows(&mut self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), ModelError> {
        let cache = self.seq(seq)?;
        let longest = cache.layer_lens.iter().copied().max().unwrap_or(0);
        if keep.windows(2).any(|w| w[0] >= w[1]) || keep.iter().any(|&k| base + k >= longest) {
            return Err(ModelError::Invalid(format!(
                "keep_rows: offsets {keep:?} after {base} must increase within the cache"
            )));
        }
        if !keep.is_empty() {
            self.unshare(seq, base)?;
            self.launch_keep(seq, base, keep).map_err(dev)?;
        }
        let cache = self
            .seqs
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        cache.kept(base, keep.len(), &mut self.pool);
        Ok(())
    }

    fn release(&mut self, seq: SeqId) {
        if let Some(mut cache) = self.seqs.remove(&seq) {
            cache.release(&mut self.pool);
        }
    }

    fn live_sequences(&self) -> usize {
        self.seqs.len()
    }

    fn kv_bytes(&self) -> usize {
        // The sequences' KV, as on the CPU: blocks only the prefix cache holds are its own.
        let held = self.pool.capacity() - self.pool.available() - self.cache_only_blocks();
        held * block_bytes(&self.config)
    }

    fn kv_capacity_bytes(&self, sequences: usize) -> Option<usize> {
        // Each sequence may leave up to one block of every layer part-filled.
        let blocks = self.pool.capacity().saturating_sub(sequences);
        Some(blocks * block_bytes(&self.config))
    }

    fn kv_layer(&self, seq: SeqId, layer: usize) -> Option<KvLayer> {
        let cache = self.seqs.get(&seq)?;
        if layer >= self.config.n_layers {
            return None;
        }
        let len = cache.layer_lens[layer];
        let (keys, values) = self.copy_layer(cache, layer, len).ok()?;
        Some(KvLayer { len, keys, values })
    }

    // Blocks are shared in the pool: a cached block is one more holder of the sequence's
    // block, a sequence started from cached blocks holds them too, and a write into a shared
    // block first moves the writer to a copy (`SeqCache::unshare_from`).
    fn keeps_blocks(&self) -> bool {
        true
    }

    fn store_block(
        &mut self,
        seq: SeqId,
        id: BlockId,
        first: usize,
        len: usize,
    ) -> Result<(), ModelError> {
        let cache = self.seq(seq)?;
        let shortest = cache.layer_lens.iter().copied().min().unwrap_or(0);
        if !first.is_multiple_of(KV_BLOCK) || len != KV_BLOCK || first + len > shortest {
            return Err(ModelError::Invalid(format!(
                "a cached block is one whole pool block of committed tokens ({first}+{len} of \
                 {shortest})"
            )));
        }
        let block = cache.blocks[first / KV_BLOCK];
        self.pool.share(block);
        if let Some(old) = self.stored.insert(id, block) {
            self.pool.give([old]);
        }
        Ok(())
    }

    fn new_sequence_from(&mut self, blocks: &[BlockId]) -> Result<SeqId, ModelError> {
        let pool_blocks = blocks
            .iter()
            .map(|id| self.stored.get(id).copied())
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| ModelError::Invalid("a cached block is gone".into()))?;
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let cache = SeqCache::from_shared(self.config.n_layers, &pool_blocks, &mut self.pool);
        self.seqs.insert(id, cache);
        Ok(id)
    }

    fn drop_blocks(&mut self, ids: &[BlockId]) {
        for id in ids {
            if let Some(b) = self.stored.remove(id) {
                self.pool.give([b]);
            }
        }
    }

    fn block_bytes(&self) -> usize {
        self.stored.len() * block_bytes(&self.config)
    }

    fn kv_free_bytes(&self) -> Option<usize> {
        Some(self.pool.available() * block_bytes(&self.config))
    }
}

impl CudaModel {
    /// Move kept tree rows into place in every layer (kernel kv_keep).
    fn launch_keep(&self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), CudaError> {
        let cache = self
            .seqs
            .get(&seq)
            .ok_or_else(|| CudaError::Driver(format!("unknown sequence {seq:?}")))?;
        let s = &self.gpu.stream;
        let table: Vec<i32> = cache.blocks.iter().map(|&b| b as i32).collect();
        let keep32: Vec<i32> = keep.iter().map(|&k| k as i32).collect();
        let lens: Vec<i32> = cache.layer_lens.iter().map(|&l| l as i32).collect();
        let (table, keep_d, lens) = (
            s.clone_htod(&table)?,
            s.clone_htod(&keep32)?,
            s.clone_htod(&lens)?,
        );
        let (stride, n, base, width) = (
            self.layer_stride() as i64,
            keep.len() as i32,
            base as i32,
            self.config.kv_width() as i32,
        );
        let mut b = self.gpu.launch("kv_keep")?;
        b.arg(&self.k_pool)
            .arg(&self.v_pool)
            .arg(&stride)
            .arg(&table)
            .arg(&lens)
            .arg(&keep_d)
            .arg(&n)
            .arg(&base)
            .arg(&width);
        go(b, (self.config.n_layers as u32, 1, 1), (256, 1, 1))
    }

    /// One layer of a sequence's cache, copied to the host block by block.
    fn copy_layer(
        &self,
        cache: &SeqCache,
        layer: usize,
        len: usize,
    ) -> Result<(Vec<f16>, Vec<f16>), CudaError> {
        let width = self.config.kv_width();
        let block = KV_BLOCK * width;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (i, &b) in cache.blocks.iter().enumerate() {
            let rows = len.saturating_sub(i * KV_BLOCK).min(KV_BLOCK);
            if rows == 0 {
                break;
            }
            let at = layer * self.layer_stride() + b as usize * block;
            for (pool, out) in [(&self.k_pool, &mut keys), (&self.v_pool, &mut values)] {
                let bits = self
                    .gpu
                    .stream
                    .clone_dtoh(&pool.slice(at..at + rows * width))?;
                out.extend(bits.into_iter().map(f16::from_bits));
            }
        }
        Ok((keys, values))
    }
}
