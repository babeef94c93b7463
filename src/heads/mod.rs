//! Medusa heads: the bundle a server drafts with, their training by self-distillation, their
//! calibration, and the draft vocabulary they propose from.

pub mod bundle;
pub mod calibration;
pub mod draft_vocab;
pub mod trainer;
pub mod training;
