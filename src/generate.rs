//! Generation: prefill the prompt, then rounds of draft → verify in one target pass →
//! commit. With the plain drafter (k = 0) a round is one ordinary decode step, so plain and
//! speculative decoding share this one loop.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_policies::AdaptiveK;
use specgate_strategies::{
    verify, Draft, DraftContext, Drafter, SamplingParams, SpecStats, TokenId, Verdict,
};

use crate::model::{LogitRows, Model, ModelError, SeqId};
use crate::stop::StopMatcher;
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("prompt of {prompt} tokens plus max_tokens {max} exceeds the context of {context}")]
    TooLong {
        prompt: usize,
        max: usize,
        context: usize,
    },
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[from] specgate_strategies::SamplingError),
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub seed: u64,
    pub stop: Vec<String>,
    /// Most drafts per round (k); 0 is plain decoding whatever the drafter.
    pub max_draft_tokens: usize,
    /// Choose k each round (up to `max_draft_tokens`) from the request's measured α and
    /// costs, plain decoding included, instead of always drafting `max_draft_tokens`.
    pub adaptive_k: bool,
}

/// Why generation ended, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
}

#[derive(Debug, Clone, Serialize)]
pub struct GenerateOutput {
    pub text: String,
    pub token_ids: Vec<TokenId>,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Target forwards, the prompt's included.
    pub target_passes: usize,
    pub finish_reason: FinishReason,
    #[serde(skip)]
    pub stats: SpecStats,
    #[serde(skip)]
    pub prefill_time: Duration,
    #[serde(skip)]
    pub decode_time: Duration,
}

impl GenerateOutput {
    /// Generated tokens per second of the whole generation, the prompt's pass included.
    pub fn tokens_per_second(&self) -> f64 {
        let secs = (self.prefill_time + self.decode_time).as_secs_f64();
        if secs > 0.0 {
            self.generated_tokens as f64 / secs
        } else {
            0.0
        }
    }
}

/// Generate from `prompt`, drafting with `drafter`, calling `on_text` with each piece of text
/// as it becomes final (whole UTF-8 characters, stop strings held back). A drafter that fails
/// or panics costs only its round, which runs as plain decoding (counted in the stats).
pub fn generate(
    model: &mut Model,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn Drafter,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    let seq = model.new_sequence();
    let result = generate_in(model, seq, tok, prompt, params, drafter, on_text);
    model.release(seq);
    result
}

fn validate(
    model: &Model,
    prompt: &[TokenId],
    params: &GenerateParams,
) -> Result<(), GenerateError> {
    params.sampling.validate()?;
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let context = model.config().context_length;
    if prompt.len() + params.max_tokens > context {
        return Err(GenerateError::TooLong {
            prompt: prompt.len(),
            max: params.max_tokens,
            context,
        });
    }
    Ok(())
}

/// The committed text so far and what ends it.
struct Output<'a, F: FnMut(&str)> {
    tok: &'a Tokenizer,
    max_tokens: usize,
    ids: Vec<TokenId>,
    text: String,
    stream: StreamDecoder,
    stops: StopMatcher,
    finish: Option<FinishReason>,
    on_text: F,
}

impl<F: FnMut(&str)> Output<'_, F> {
    /// Commit one token; sets `finish` at EOS, a stop string or max_tokens.
    fn push(&mut self, t: TokenId) -> Result<(), GenerateError> {
        if t == self.tok.eos() {
            self.finish = Some(FinishReason::Stop);
            return Ok(());
        }
        self.ids.push(t);
        if let Some(piece) = self.stream.push(self.tok, t)? {
            self.release(&piece);
        }
        if self.stops.stopped() {
            self.finish = Some(FinishReason::Stop);
        } else if self.ids.len() >= self.max_tokens {
            self.finish = Some(FinishReason::Length);
        }
        Ok(())
    }

    fn release(&mut self, piece: &str) {
        let released = self.stops.push(piece);
        if !released.is_empty() {
            (self.on_text)(&released);
            self.text += &released;
        }
    }

    fn finish_text(&mut self) -> Result<(), GenerateError> {
        if !self.stops.stopped() {
            let tail = self.stream.flush(self.tok)?.unwrap_or_default();
            self.release(&tail);
            let held = self.stops.finish();
            if !held.is_empty() {
                (self.on_text)(&held);
                self.text += &held;
            }
        }
        Ok(())
    }
}

/// [`generate`] on an empty sequence the caller created and will release (tests inspect its
/// cache: it ends holding the prompt and every committed token but the last).
pub fn generate_in(
    model: &mut Model,
    seq: SeqId,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn Drafter,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    validate(model, prompt, params)?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let start = Instant::now();
    let first = model.forward_one(seq, prompt, LogitRows::Last)?;
    let mut pending = params.sampling.sample(first.row(0, 0), &mut rng);
    let prefill_time = start.elapsed();
    let start = Instant::now();
    let mut out = Output {
        tok,
        max_tokens: params.max_tokens,
        ids: Vec::new(),
        text: String::new(),
        stream: StreamDecoder::new(),
        stops: StopMatcher::new(&params.stop),
        finish: (params.max_tokens == 0).then_some(FinishReason::Length),
        on_text,
    };
    let mut stats = SpecStats::default();
    let mut controller = params
        .adaptive_k
        .then(|| AdaptiveK::new(params.max_draft_tokens, 0.5));
    let mut history: Vec<TokenId> = prompt.to_vec();
    if out.finish.is_none() {
        out.push(pending)?;
        history.push(pending);
    }
    while out.finish.is_none() {
        // Never draft past max_tokens: a round commits up to k + 1 tokens.
        let wanted = controller
            .as_mut()
            .map_or(params.max_draft_tokens, AdaptiveK::next_k);
        let k = wanted.min(params.max_tokens - out.ids.len() - 1);
        let ctx = DraftContext {
            tokens: &history,
            prompt_len: prompt.len(),
            sampling: &params.sampling,
        };
        let round = speculate(
            model, seq, drafter, &ctx, k, pending, params, &mut rng, &mut stats,
        )?;
        let (draft, verdict) = (round.draft, round.verdict);
        if let Some(c) = controller.as_mut() {
            c.observe(
                draft.len(),
                verdict.accepted,
                round.draft_secs,
                round.verify_secs,
            );
        }
        let committed = draft.tokens[..verdict.accepted]
            .iter()
            .chain([&verdict.next]);
        for &token in committed {
            out.push(token)?;
            history.push(token);
            if out.finish.is_some() {
                break;
            }
        }
        if out.finish.is_some() {
            // Stopped inside the round: accepted drafts past the end leave the cache too.
            let end = prompt.len() + out.ids.len();
            if model.seq_len(seq).is_some_and(|len| len > end) {
                model.truncate(seq, end)?;
            }
        }
        drafter.on_commit(
            &DraftContext {
                tokens: &history,
                prompt_len: prompt.len(),
                sampling: &params.sampling,
            },
            verdict.accepted,
        );
        pending = verdict.next;
    }
    out.finish_text()?;
    drafter.finish();
    Ok(GenerateOutput {
        text: out.text,
        prompt_tokens: prompt.len(),
        generated_tokens: out.ids.len(),
        token_ids: out.ids,
        target_passes: 1 + stats.rounds as usize,
        finish_reason: out.finish.unwrap_or(FinishReason::Length),
        stats,
        prefill_time,
        decode_time: start.elapsed(),
    })
}

/// What one round drafted, what verification decided, and the seconds each took.
struct Round {
    draft: Draft,
    verdict: Verdict,
    draft_secs: f64,
    verify_secs: f64,
}

/// One round: propose up to k drafts, run `[pending] + drafts` through the target in one
/// pass, verify, and roll the cache back to `pending` plus the accepted drafts.
#[allow(clippy::too_many_arguments)]
fn speculate(
    model: &mut Model,
    seq: SeqId,
    drafter: &mut dyn Drafter,
    ctx: &DraftContext<'_>,
    k: usize,
    pending: TokenId,
    params: &GenerateParams,
    rng: &mut ChaCha8Rng,
    stats: &mut SpecStats,
) -> Result<Round, GenerateError> {
    let vocab = model.config().vocab_size;
    let t = Instant::now();
    let draft = propose(drafter, ctx, k, vocab, stats);
    let draft_time = t.elapsed();
    let t = Instant::now();
    let base = model.seq_len(seq).unwrap_or(0);
    let mut input = Vec::with_capacity(draft.len() + 1);
    input.push(pending);
    input.extend_from_slice(&draft.tokens);
    let rows = model.forward_one(seq, &input, LogitRows::All)?; // [k + 1, vocab]
    let verdict = verify(&draft, rows.item_logits(0), vocab, &params.sampling, rng);
    // Rejected drafts leave the cache; `verdict.next` is not in it yet.
    model.truncate(seq, base + 1 + verdict.accepted)?;
    let verify_time = t.elapsed();
    stats.record_round(draft.len(), verdict.accepted, draft_time, verify_time);
    Ok(Round {
        draft,
        verdict,
        draft_secs: draft_time.as_secs_f64(),
        verify_secs: verify_time.as_secs_f64(),
    })
}

/// Ask the drafter for up to k tokens. An error, a panic or a malformed draft (a token
/// outside the vocabulary, a q row of the wrong size) becomes an empty draft, so the round
/// runs as plain decoding, and is counted.
fn propose(
    drafter: &mut dyn Drafter,
    ctx: &DraftContext<'_>,
    k: usize,
    vocab: usize,
    stats: &mut SpecStats,
) -> Draft {
    if k == 0 {
        return Draft::empty();
    }
    let well_formed = |d: &Draft| {
        d.tokens.iter().all(|&t| (t as usize) < vocab)
            && d.q
                .as_ref()
                .is_none_or(|q| q.len() == d.tokens.len() && q.iter().all(|r| r.len() == vocab))
    };
    match catch_unwind(AssertUnwindSafe(|| drafter.propose(ctx, k))) {
        Ok(Ok(mut d)) => {
            d.tokens.truncate(k);
            if let Some(q) = d.q.as_mut() {
                q.truncate(d.tokens.len());
            }
            if well_formed(&d) {
                return d;
            }
            stats.drafter_failures += 1;
            Draft::empty()
        }
        Ok(Err(_)) | Err(_) => {
            stats.drafter_failures += 1;
            Draft::empty()
        }
    }
}
