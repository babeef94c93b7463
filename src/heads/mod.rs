//! Draft heads that read the target's hidden states: Medusa heads (the bundle a server drafts
//! with, their training by self-distillation, their calibration, the draft vocabulary they
//! propose from) and the EAGLE draft layer (its bundle, data and training).

pub mod bundle;
pub mod calibration;
pub mod draft_vocab;
pub mod eagle_bundle;
pub mod eagle_data;
pub mod eagle_loss;
pub mod eagle_trainer;
pub mod eagle_training;
pub mod trainer;
pub mod training;
