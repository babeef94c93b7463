//! The operator's and developer's tools around the server: benchmarks, the load generator,
//! the soak, the shipped prompt sets, and routing policies as files.

pub mod bench_decode;
pub mod bench_device;
pub mod bench_lm_head;
pub mod bench_policy;
pub mod bench_spec;
pub mod bench_store;
pub mod bench_structured;
pub mod calibrate_policy;
pub mod candle_reference;
pub mod conversations;
pub mod loadgen;
pub mod loadgen_report;
pub mod noisy_neighbour;
pub mod policy_files;
pub mod prompts;
pub mod scenario_report;
pub mod scenarios;
pub mod soak;
pub mod soak_client;
