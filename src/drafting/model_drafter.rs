//! Drafting with a language model: a separate draft GGUF with the target's vocabulary, or the
//! target's own first L layers (early exit). The draft model keeps its own KV cache for the
//! sequence and rolls it back to whatever the target committed.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use specgate_strategies::{
    sample_from, Draft, DraftContext, DraftError, Drafter, SpecStats, TokenId, TrackRecord,
};

use crate::model::tokenizer::Tokenizer;
use crate::model::{CpuModel, LogitRows, MatmulBackend, ModelError, SeqId, TargetBackend};

/// Draft-model weights shared by the drafters of many sequences (each has its own cache).
pub type SharedModel = Arc<Mutex<CpuModel>>;

/// Most tokens the draft model takes in before one draft. Drafting runs on the engine's
/// thread between steps, so a long prompt fed at once would stall every sequence the way
/// unchunked prefill would; it is caught up over several rounds instead, drafting nothing
/// until it is in.
pub const CATCH_UP_CHUNK: usize = 256;

/// A draft model and the one sequence it drafts for.
pub struct ModelDrafter {
    name: &'static str,
    model: SharedModel,
    seq: SeqId,
    kv_bytes_per_token: usize,
    fed: Vec<TokenId>, // tokens in the draft model's cache
    catch_up_chunk: usize,
    /// A catch-up is under way: each commit takes the next chunk in, drafting or not (the
    /// controller may be on plain rounds and propose nothing until its next probe).
    catching_up: bool,
    rng: ChaCha8Rng,
    /// Its rounds over every sequence it drafted for (see [`TrackRecord`]), and the last
    /// draft awaiting its verdict: tokens and drafting time.
    record: SpecStats,
    pending: (usize, Duration),
}

#[derive(Debug, thiserror::Error)]
pub enum DraftModelError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("draft model {path}: {why}; it must share the target's vocabulary")]
    Vocabulary { path: String, why: String },
}

impl ModelDrafter {
    /// A separate draft model; refused unless its vocabulary equals the target's.
    pub fn separate(path: &Path, target: &Tokenizer, seed: u64) -> Result<Self, DraftModelError> {
        Ok(Self::for_sequence(
            "draft",
            Self::load_separate(path, target)?,
            seed,
        ))
    }

    /// Load a separate draft model, refused unless its vocabulary equals the target's.
    pub fn load_separate(path: &Path, target: &Tokenizer) -> Result<SharedModel, DraftModelError> {
        let (model, md) = CpuModel::load_layers(path, MatmulBackend::default(), None)?;
        let vocab_err = |why: String| DraftModelError::Vocabulary {
            path: path.display().to_string(),
            why,
        };
        let draft_tok = Tokenizer::from_gguf_metadata(&md).map_err(|e| vocab_err(e.to_string()))?;
        if draft_tok.vocab_size() != target.vocab_size() {
            return Err(vocab_err(format!(
                "{} tokens against the target's {}",
                draft_tok.vocab_size(),
                target.vocab_size()
            )));
        }
        let differs = (0..target.vocab_size() as u32)
            .find(|&i| draft_tok.token_str(i) != target.token_str(i));
        if let Some(i) = differs {
            return Err(vocab_err(format!("token {i} differs")));
        }
        Ok(Arc::new(Mutex::new(model)))
    }

    /// The target's first `layers` layers, final norm and LM head.
    pub fn early_exit(
        target_path: &Path,
        layers: usize,
        seed: u64,
    ) -> Result<Self, DraftModelError> {
        Ok(Self::for_sequence(
            "early-exit",
            Self::load_early_exit(target_path, layers)?,
            seed,
        ))
    }

    /// Load the target's first `layers` layers as a draft model.
    pub fn load_early_exit(
        target_path: &Path,
        layers: usize,
    ) -> Result<SharedModel, DraftModelError> {
        let (model, _) =
            CpuModel::load_layers(target_path, MatmulBackend::default(), Some(layers))?;
        Ok(Arc::new(Mutex::new(model)))
    }

    /// A drafter with its own sequence in a shared draft model; the sequence is released
    /// when the drafter is dropped.
    pub fn for_sequence(name: &'static str, model: SharedModel, seed: u64) -> Self {
        let (seq, kv_bytes_per_token) = {
            let mut m = lock_model(&model);
            (m.new_sequence(), m.config().kv_bytes_per_token())
        };
        Self {
            name,
            model,
            seq,
            kv_bytes_per_token,
            fed: Vec::new(),
            catch_up_chunk: CATCH_UP_CHUNK,
            catching_up: false,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5EED),
            record: SpecStats::default(),
            pending: (0, Duration::ZERO),
        }
    }

    /// Take in at most `n` tokens a round (default [`CATCH_UP_CHUNK`]; at least 2, so the
    /// catch-up outruns the one token a plain round adds).
    pub fn with_catch_up_chunk(mut self, n: usize) -> Self {
        self.catch_up_chunk = n.max(2);
        self
    }

    /// Bring the draft cache toward `tokens` (roll back what diverged, feed what is missing)
    /// and return the logits after the last token, or None while more than one chunk is
    /// missing (a chunk was fed). `tokens` is never empty here.
    fn sync(&mut self, tokens: &[TokenId]) -> Result<Option<Vec<f32>>, ModelError> {
        let common = self
            .fed
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // Keep at least one token to feed, so there is a row of logits to draft from.
        let keep = common.min(tokens.len() - 1);
        let shared = Arc::clone(&self.model);
        let mut model = lock_model(&shared);
        model.truncate(self.seq, keep)?;
        self.fed.truncate(keep);
        if tokens.len() - keep > self.catch_up_chunk {
            let chunk = &tokens[keep..keep + self.catch_up_chunk];
            model.forward_one(self.seq, chunk, LogitRows::None)?;
            self.fed.extend_from_slice(chunk);
            return Ok(None);
        }
        let out = model.forward_one(self.seq, &tokens[keep..], LogitRows::Last)?;
        self.fed.extend_from_slice(&tokens[keep..]);
        Ok(Some(out.row(0, 0).to_vec()))
    }
}

/// The shared draft model, even after a panic while another request held it: each sequence
/// re-syncs its own cache before drafting (`sync` truncates to what it knows it fed), and a
/// draft is only a guess the target checks.
fn lock_model(model: &SharedModel) -> MutexGuard<'_, CpuModel> {
    model.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drafter for ModelDrafter {
    fn name(&self) -> &'static str {
        self.name
    }

    fn kv_bytes_per_token(&self) -> usize {
        self.kv_bytes_per_token
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let err = |e: ModelError| DraftError(e.to_string());
        if ctx.tokens.is_empty() || k == 0 {
            return Ok(Draft::empty());
        }
        let room = lock_model(&self.model)
            .config()
            .context_length
            .saturating_sub(ctx.tokens.len() + 1);
        let k = k.min(room);
        if k == 0 {
            return Ok(Draft::empty());
        }
        let started = Instant::now();
        let Some(mut logits) = self.sync(ctx.tokens).map_err(err)? else {
            self.catching_up = true;
            return Ok(Draft::empty());
        };
        let mut draft = Draft {
            tokens: Vec::with_capacity(k),
            q: Some(Vec::with_capacity(k)),
            parents: None,
        };
        for i in 0..k {
            // q is shaped like the target's p: greedy → a point mass on the argmax.
            let q = ctx.sampling.probs(&logits);
            let t = sample_from(&q, &mut self.rng);
            draft.tokens.push(t);
            if let Some(qs) = draft.q.as_mut() {
                qs.push(q);
            }
            if i + 1 < k {
                let out = lock_model(&self.model)
                    .forward_one(self.seq, &[t], LogitRows::Last)
                    .map_err(err)?;
                self.fed.push(t);
                logits = out.row(0, 0).to_vec();
            }
        }
        self.pending = (k, started.elapsed());
        Ok(draft)
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        if self.catching_up && !ctx.tokens.is_empty() {
            // Done once the rest fits in one chunk; a failure leaves it to the next propose.
            self.catching_up = matches!(self.sync(ctx.tokens), Ok(None));
        }
        if let (drafted @ 1.., secs) = std::mem::take(&mut self.pending) {
            self.record
                .record_round(drafted, accepted, secs, Duration::ZERO);
        }
    }

    fn track_record(&self) -> Option<TrackRecord> {
        let r = &self.record;
        (r.verified > 0).then(|| TrackRecord {
            alpha: r.alpha(),
            judged: r.verified as f64,
            step_secs: r.draft_time.as_secs_f64() / r.drafted as f64,
        })
    }
}

impl Drop for ModelDrafter {
    fn drop(&mut self) {
        lock_model(&self.model).release(self.seq);
    }
}
