//! Generation: prefill the prompt, then rounds of draft → verify in one target pass →
//! commit. With the plain drafter (k = 0) a round is one ordinary decode step, so plain and
//! speculative decoding share this one loop.

use std::time::{Duration, Instant};

use serde::Serialize;
use specgate_policies::{LoadView, StepCosts};
use specgate_strategies::{Drafter, SpecStats, TokenConstraint, TokenId};

pub use super::params::{GenerateError, GenerateParams};
pub use super::sequence::FinishReason;
use super::sequence::SequenceState;
use crate::model::tokenizer::Tokenizer;
use crate::model::{BatchItem, ForwardOptions, LogitRows, SeqId, TargetBackend};

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
    model: &mut dyn TargetBackend,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn Drafter,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    generate_constrained(model, tok, prompt, params, drafter, None, on_text)
}

/// [`generate`] with the output held to a grammar (None: unconstrained).
pub fn generate_constrained(
    model: &mut dyn TargetBackend,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn Drafter,
    grammar: Option<Box<dyn TokenConstraint>>,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    let seq = model.new_sequence();
    let run = Run {
        tok,
        prompt,
        params,
        grammar,
    };
    let result = run_in(model, seq, run, drafter, on_text);
    model.release(seq);
    result
}

/// One generation's inputs.
struct Run<'a> {
    tok: &'a Tokenizer,
    prompt: &'a [TokenId],
    params: &'a GenerateParams,
    grammar: Option<Box<dyn TokenConstraint>>,
}

pub fn validate(
    model: &dyn TargetBackend,
    prompt: &[TokenId],
    params: &GenerateParams,
) -> Result<(), GenerateError> {
    params.sampling.validate()?;
    params.penalties.validate(model.config().vocab_size)?;
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

/// [`generate`] on an empty sequence the caller created and will release (tests inspect its
/// cache: it ends holding the prompt and every committed token but the last).
pub fn generate_in(
    model: &mut dyn TargetBackend,
    seq: SeqId,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    drafter: &mut dyn Drafter,
    on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    let run = Run {
        tok,
        prompt,
        params,
        grammar: None,
    };
    run_in(model, seq, run, drafter, on_text)
}

fn run_in(
    model: &mut dyn TargetBackend,
    seq: SeqId,
    r: Run<'_>,
    drafter: &mut dyn Drafter,
    mut on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
    let Run {
        tok,
        prompt,
        params,
        grammar,
    } = r;
    validate(model, prompt, params)?;
    let mut state = SequenceState::new(seq, prompt, params);
    if let Some(g) = grammar {
        state.constrain(g);
    }
    let mut emit = |piece: String| {
        if !piece.is_empty() {
            on_text(&piece);
        }
    };
    let start = Instant::now();
    let with_hidden = ForwardOptions {
        hidden: true,
        ..ForwardOptions::default()
    };
    let first = model.forward(&[item(seq, prompt, LogitRows::Last)], with_hidden)?;
    emit(state.start(first.row(0, 0), first.item_hidden(0), tok)?);
    let prefill_time = start.elapsed();
    let start = Instant::now();
    let vocab = model.config().vocab_size;
    // This sequence's own passes give the cost of a verify row (the prompt pass is left out:
    // its attention over the whole prompt is not what a round's rows cost).
    let mut step_costs = StepCosts::default();
    while !state.is_finished() {
        let row_cost = params.row_cost.unwrap_or_else(|| {
            LoadView {
                sequences: 1,
                step: step_costs.fit(),
            }
            .row_cost() as f32
        });
        let round = state.propose(drafter, usize::MAX, usize::MAX, Some(row_cost), vocab);
        let t = Instant::now();
        let verify = BatchItem {
            tree: round.draft.parents.as_deref(),
            ..item(seq, &round.tokens, LogitRows::All)
        };
        let rows = model.forward(&[verify], with_hidden)?;
        let verify_time = t.elapsed();
        step_costs.observe(1, round.tokens.len(), verify_time.as_secs_f64());
        let (logits, hidden) = (rows.item_logits(0), rows.item_hidden(0)); // [k + 1, vocab | hidden]
        emit(state.settle(model, round, logits, hidden, verify_time, drafter, tok)?);
    }
    emit(state.finish(drafter, tok)?);
    let stats = state.stats.clone();
    Ok(GenerateOutput {
        text: state.text().to_string(),
        prompt_tokens: prompt.len(),
        generated_tokens: state.generated().len(),
        token_ids: state.generated().to_vec(),
        target_passes: 1 + stats.rounds as usize,
        finish_reason: state.finish_reason().unwrap_or(FinishReason::Length),
        stats,
        prefill_time,
        decode_time: start.elapsed(),
    })
}

fn item(seq: SeqId, tokens: &[TokenId], logits: LogitRows) -> BatchItem<'_> {
    BatchItem {
        tree: None,
        seq,
        tokens,
        logits,
    }
}
