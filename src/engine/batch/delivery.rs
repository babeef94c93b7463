//! Delivery: a step's outcome to its request, and the request's summary when it ends.

use std::time::Instant;

use super::{Engine, Undelivered};
use crate::engine::generate::GenerateError;
use crate::engine::sequence::FinishReason;
use crate::engine::{Event, Failure, Summary};

impl Engine {
    /// Send a step's outcome to its request. When the sequence has ended: Some(whether its
    /// cache is sound to keep).
    pub(super) fn deliver(
        &mut self,
        i: usize,
        outcome: Result<String, GenerateError>,
    ) -> Option<bool> {
        let l = &mut self.live[i];
        let text = match outcome {
            Ok(text) => text,
            Err(e) => {
                let _ = l.sub.events.send(Event::Failed(Failure::of(&e)));
                return Some(false);
            }
        };
        let tokens = l.state.generated().len();
        l.held.text += &text;
        l.held.steps.push((Instant::now(), tokens));
        if l.sub.stream || l.state.is_finished() {
            let Undelivered { text, steps } = std::mem::take(&mut l.held);
            let _ = l.sub.events.send(Event::Text {
                text,
                logprobs: l.state.take_logprobs(),
                steps,
            });
        }
        if !l.state.is_finished() {
            return None;
        }
        let tail = match l.state.finish(&mut *l.sub.drafter, &self.lm.tokenizer) {
            Ok(tail) => tail,
            Err(e) => {
                let _ = l.sub.events.send(Event::Failed(Failure::of(&e)));
                return Some(false);
            }
        };
        // The tail carries the log-probabilities still held (text held to the end, or cut by
        // a stop string).
        let logprobs = l.state.take_logprobs();
        if !tail.is_empty() || !logprobs.is_empty() {
            let _ = l.sub.events.send(Event::Text {
                text: tail,
                logprobs,
                steps: Vec::new(),
            });
        }
        let summary = Summary {
            prompt_tokens: l.state.prompt().len(),
            cached_tokens: l.cached,
            completion_tokens: tokens,
            finish_reason: l.state.finish_reason().unwrap_or(FinishReason::Length),
            plan: l.sub.plan,
            stats: l.state.stats.clone(),
            queued: l.queued,
            sequences: match l.state.stats.rounds {
                0 => 1.0,
                rounds => l.round_company as f64 / rounds as f64,
            },
            token_ids: l.state.generated().to_vec(),
            prediction: l.sub.drafter.prediction_tokens(),
            top2_gaps: l.state.gaps().to_vec(),
        };
        let _ = l.sub.events.send(Event::Done(summary));
        Some(true)
    }
}
