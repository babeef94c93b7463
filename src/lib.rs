//! specgate: a multi-tenant LLM gateway with exact speculative decoding.
//!
//! This crate holds the target engine (our own llama forward on candle), the tokenizer and
//! chat template, generation, model fetching and the benchmarks; the pure speculative core
//! lives in `specgate-strategies`, compute kernels in `specgate-kernels`.

pub mod answer_corpus;
pub mod bench;
pub mod bench_policy;
pub mod bench_spec;
pub mod chat;
pub mod clock;
pub mod draft_vocab;
mod drafter_guard;
pub mod engine;
pub mod faults;
pub mod fetch;
pub mod gateway;
pub mod generate;
pub mod heads_calibration;
pub mod heads_trainer;
pub mod history;
pub mod loaded;
pub mod loadgen;
pub mod loadgen_report;
pub mod logprobs;
pub mod medusa_heads;
pub mod model;
pub mod model_drafter;
pub mod policy_io;
pub mod policy_store;
pub mod prompts;
pub mod quota;
pub mod sequence;
pub mod shadow;
pub mod soak;
pub mod soak_client;
pub mod stop;
pub mod strategy;
pub mod telemetry;
pub mod tokenizer;
pub mod train_heads;

pub use specgate_strategies::{SamplingParams, TokenId};
