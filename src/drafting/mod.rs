//! Building drafters: the registry (a strategy's name → its drafter), the drafters that run a
//! language model (a separate draft model, the target's first layers), the guard that keeps a
//! drafter's fault from failing a request, and the answer corpus suffix drafting consults.

pub mod answer_corpus;
pub mod guard;
pub mod model_drafter;
pub mod registry;
