//! The request's penalties and logit bias, validated into the engine's [`Penalties`]: each
//! rule names its field and range (OpenAI's for presence, frequency and bias; vLLM's for
//! repetition). Pure.

use std::collections::BTreeMap;

use specgate_strategies::{Penalties, TokenId};

use crate::gateway::error::ApiError;

/// Most tokens one `logit_bias` may name (OpenAI allows 300; a bias is cheap, a map of the
/// whole vocabulary is not).
pub const MAX_BIASED_TOKENS: usize = 1024;

/// The penalty fields as the body gives them.
#[derive(Debug, Default, Clone)]
pub struct PenaltyFields {
    pub presence: Option<f64>,
    pub frequency: Option<f64>,
    pub repetition: Option<f64>,
    pub logit_bias: Option<BTreeMap<String, f64>>,
}

/// Validate against a vocabulary of `vocab` token ids.
pub fn penalties(f: PenaltyFields, vocab: usize) -> Result<Penalties, ApiError> {
    let within = |param: &str, v: Option<f64>, lo: f64, hi: f64, default: f64| match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::invalid(
            Some(param),
            format!("`{param}` must be between {lo} and {hi}, got {x}"),
        )),
        v => Ok(v.unwrap_or(default) as f32),
    };
    let presence = within("presence_penalty", f.presence, -2.0, 2.0, 0.0)?;
    let frequency = within("frequency_penalty", f.frequency, -2.0, 2.0, 0.0)?;
    let repetition = match f.repetition {
        Some(r) if !(r > 0.0 && r <= 2.0) => {
            return Err(ApiError::invalid(
                Some("repetition_penalty"),
                format!("`repetition_penalty` must be above 0 and at most 2 (1: off), got {r}"),
            ))
        }
        r => r.unwrap_or(1.0) as f32,
    };
    let bias = f.logit_bias.unwrap_or_default();
    if bias.len() > MAX_BIASED_TOKENS {
        return Err(ApiError::invalid(
            Some("logit_bias"),
            format!(
                "`logit_bias` names {} tokens; at most {MAX_BIASED_TOKENS}",
                bias.len()
            ),
        ));
    }
    let mut logit_bias: Vec<(TokenId, f32)> = Vec::with_capacity(bias.len());
    for (key, b) in bias {
        let entry = bias_entry(&key, b, vocab)?;
        // "7", "07" and "+7" are one token: biased once, or the request is ambiguous.
        if logit_bias.iter().any(|&(t, _)| t == entry.0) {
            return Err(ApiError::invalid(
                Some(&format!("logit_bias.{key}")),
                format!("`logit_bias` names token {} twice", entry.0),
            ));
        }
        logit_bias.push(entry);
    }
    Ok(Penalties {
        presence,
        frequency,
        repetition,
        logit_bias,
    })
}

/// One `logit_bias` entry: a token id (as a JSON key) and a bias from -100 to 100.
fn bias_entry(key: &str, bias: f64, vocab: usize) -> Result<(TokenId, f32), ApiError> {
    let param = format!("logit_bias.{key}");
    let token = key
        .parse::<TokenId>()
        .ok()
        .filter(|&t| (t as usize) < vocab)
        .ok_or_else(|| {
            ApiError::invalid(
                Some(&param),
                format!(
                    "`logit_bias` keys are token ids from 0 to {}, got {key:?}",
                    vocab.saturating_sub(1)
                ),
            )
        })?;
    if !(-100.0..=100.0).contains(&bias) {
        return Err(ApiError::invalid(
            Some(&param),
            format!("`{param}` must be between -100 and 100, got {bias}"),
        ));
    }
    Ok((token, bias as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(f: PenaltyFields) -> Option<String> {
        penalties(f, 100).err().and_then(|e| e.param)
    }

    #[test]
    fn each_out_of_range_value_is_named_by_its_field() {
        let none = PenaltyFields::default;
        assert_eq!(penalties(none(), 100).unwrap(), Penalties::none());
        let presence = PenaltyFields {
            presence: Some(2.5),
            ..none()
        };
        assert_eq!(param(presence).as_deref(), Some("presence_penalty"));
        let repetition = PenaltyFields {
            repetition: Some(0.0),
            ..none()
        };
        assert_eq!(param(repetition).as_deref(), Some("repetition_penalty"));
        let bias = |k: &str, b: f64| PenaltyFields {
            logit_bias: Some([(k.to_string(), b)].into()),
            ..none()
        };
        assert_eq!(param(bias("100", 1.0)).as_deref(), Some("logit_bias.100"));
        assert_eq!(param(bias("dog", 1.0)).as_deref(), Some("logit_bias.dog"));
        assert_eq!(param(bias("7", -101.0)).as_deref(), Some("logit_bias.7"));
        let twice = PenaltyFields {
            logit_bias: Some([("7".to_string(), 1.0), ("07".to_string(), 1.0)].into()),
            ..none()
        };
        assert_eq!(param(twice).as_deref(), Some("logit_bias.7"));
        let ok = penalties(bias("7", -100.0), 100).unwrap();
        assert_eq!(ok.logit_bias, vec![(7, -100.0)]);
    }
}
