//! The penalty flags shared by `specgate generate` and `specgate bench spec`.

use clap::Args;
use specgate_strategies::Penalties;

#[derive(Args, Debug, Clone, Copy)]
pub struct PenaltyArgs {
    /// Subtracted from a token's logit once it is in the output (-2 to 2).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub presence_penalty: f32,
    /// Subtracted from a token's logit per time it is in the output (-2 to 2).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub frequency_penalty: f32,
    /// A prompt or output token's positive logit is divided by it, a negative one multiplied
    /// (1: none; above 0, at most 2).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
}

impl PenaltyArgs {
    pub fn penalties(&self) -> Penalties {
        Penalties {
            presence: self.presence_penalty,
            frequency: self.frequency_penalty,
            repetition: self.repetition_penalty,
            logit_bias: Vec::new(),
        }
    }
}
