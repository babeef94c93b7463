//! Plain autoregressive generation: prefill the prompt, then one target pass per token.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_strategies::{SamplingParams, TokenId};

use crate::model::{LogitRows, Model, ModelError};
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
    pub target_passes: usize,
    pub finish_reason: FinishReason,
    #[serde(skip)]
    pub prefill_time: Duration,
    #[serde(skip)]
    pub decode_time: Duration,
}

impl GenerateOutput {
    /// Generated tokens per second of the whole generation after the prompt was read.
    pub fn tokens_per_second(&self) -> f64 {
        let secs = (self.prefill_time + self.decode_time).as_secs_f64();
        if secs > 0.0 {
            self.generated_tokens as f64 / secs
        } else {
            0.0
        }
    }
}

/// Generate from `prompt` with plain decoding, calling `on_text` with each piece of text as
/// it becomes final (whole UTF-8 characters, stop strings held back).
pub fn generate(
    model: &mut Model,
    tok: &Tokenizer,
    prompt: &[TokenId],
    params: &GenerateParams,
    mut on_text: impl FnMut(&str),
) -> Result<GenerateOutput, GenerateError> {
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
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let seq = model.new_sequence();
    let result = (|| {
        let start = Instant::now();
        let out = model.forward_one(seq, prompt, LogitRows::Last)?;
        let mut next = params.sampling.sample(out.row(0, 0), &mut rng);
        let prefill_time = start.elapsed();
        let start = Instant::now();
        let mut passes = 1;
        let mut ids = Vec::new();
        let mut text = String::new();
        let mut stream = StreamDecoder::new();
        let mut stops = StopMatcher::new(&params.stop);
        let mut finish = FinishReason::Length;
        while ids.len() < params.max_tokens {
            if next == tok.eos() {
                finish = FinishReason::Stop;
                break;
            }
            ids.push(next);
            if let Some(piece) = stream.push(tok, next)? {
                let released = stops.push(&piece);
                on_text(&released);
                text += &released;
                if stops.stopped() {
                    finish = FinishReason::Stop;
                    break;
                }
            }
            if ids.len() == params.max_tokens {
                break;
            }
            let out = model.forward_one(seq, &[next], LogitRows::Last)?;
            passes += 1;
            next = params.sampling.sample(out.row(0, 0), &mut rng);
        }
        if !stops.stopped() {
            let tail = stream.flush(tok)?.unwrap_or_default();
            let released = stops.push(&tail) + &stops.finish();
            on_text(&released);
            text += &released;
        }
        Ok(GenerateOutput {
            text,
            prompt_tokens: prompt.len(),
            generated_tokens: ids.len(),
            token_ids: ids,
            target_passes: passes,
            finish_reason: finish,
            prefill_time,
            decode_time: start.elapsed(),
        })
    })();
    model.release(seq);
    result
}
