//! The checks every backend runs on a ragged batch before touching any cache, so a refused
//! batch changes nothing on any device and is refused with the same error on each.

use std::collections::HashSet;

use super::{BatchItem, ForwardOptions, ModelConfig, ModelError, SeqId};

/// Check `items` for a pass of `opts` against a model of `cfg` whose positions end at
/// `limit`; `cache(seq, depth)` gives a sequence's length and whether its first `depth`
/// layers all hold that many tokens (None: no such sequence). Returns the layers to run.
pub fn check(
    cfg: &ModelConfig,
    limit: usize,
    items: &[BatchItem<'_>],
    opts: ForwardOptions,
    cache: impl Fn(SeqId, usize) -> Option<(usize, bool)>,
) -> Result<usize, ModelError> {
    let depth = opts.exit_layer.unwrap_or(cfg.n_layers);
    if depth == 0 || depth > cfg.n_layers {
        return Err(ModelError::Invalid(format!(
            "exit layer {depth} outside 1..={}",
            cfg.n_layers
        )));
    }
    let mut seen = HashSet::new();
    for it in items {
        if !seen.insert(it.seq) {
            return Err(ModelError::DuplicateSequence(it.seq));
        }
        let (len, even) = cache(it.seq, depth).ok_or(ModelError::UnknownSequence(it.seq))?;
        if !even {
            return Err(ModelError::Invalid(format!(
                "sequence {:?} has layers of unequal length; truncate it first",
                it.seq
            )));
        }
        if let Some(parents) = it.tree {
            let well_formed = parents.len() + 1 == it.tokens.len()
                && parents
                    .iter()
                    .enumerate()
                    .all(|(i, p)| p.is_none_or(|p| p < i));
            if !well_formed {
                return Err(ModelError::Invalid(format!(
                    "sequence {:?}: a tree's parents must precede their children, one per \
                     token after the first",
                    it.seq
                )));
            }
        }
        if len + it.tokens.len() > limit {
            return Err(ModelError::ContextOverflow {
                needed: len + it.tokens.len(),
                limit,
            });
        }
        if let Some(&bad) = it.tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return Err(ModelError::BadToken(bad));
        }
    }
    Ok(depth)
}
