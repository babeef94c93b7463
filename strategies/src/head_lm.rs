//! What the drafters that draft through the target's LM head (the Medusa heads, the EAGLE
//! layer) share: logits checked for shape, a logit column's token id, a token's embedding, and
//! the token a row of logits gives (the argmax, or a sample with its q).

use rand::rngs::StdRng;

use crate::medusa::LmHead;
use crate::sampling::{argmax, sample_from};
use crate::{Draft, DraftContext, DraftError, TokenId};

/// The LM head's logits for `rows` states: [rows, vocab].
pub(crate) fn logits(lm: &dyn LmHead, states: &[f32], rows: usize) -> Result<Vec<f32>, DraftError> {
    let logits = lm.logits(states)?;
    if logits.len() != rows * lm.vocab() {
        return Err(DraftError("the LM head returned the wrong shape".into()));
    }
    Ok(logits)
}

/// The token id of logit column `index`; a column the LM head cannot name, or an id past the
/// target's vocabulary, is a drafter fault.
pub(crate) fn token_at(lm: &dyn LmHead, index: usize) -> Result<TokenId, DraftError> {
    lm.token_id(index)
        .filter(|&t| (t as usize) < lm.target_vocab().max(lm.vocab()))
        .ok_or_else(|| DraftError(format!("draft column {index} names no token")))
}

/// `token`'s embedding as the drafters were trained to read it (None: a zero vector), which
/// must be `width` wide.
pub(crate) fn embedding(
    lm: &dyn LmHead,
    token: TokenId,
    width: usize,
) -> Result<Option<Vec<f32>>, DraftError> {
    let row = lm.token_row(token)?;
    if row.as_ref().is_some_and(|r| r.len() != width) {
        return Err(DraftError(
            "the LM head returned a row of the wrong width".into(),
        ));
    }
    Ok(row)
}

/// Append the token a row of logits gives: the argmax for greedy requests, else a sample with
/// its q (over the target's vocabulary: ids that cannot be drafted have q = 0).
pub(crate) fn pick(
    lm: &dyn LmHead,
    ctx: &DraftContext<'_>,
    row: &[f32],
    rng: &mut StdRng,
    draft: &mut Draft,
) -> Result<(), DraftError> {
    if ctx.sampling.is_greedy() {
        draft.tokens.push(token_at(lm, argmax(row) as usize)?);
        return Ok(());
    }
    let probs = ctx.sampling.probs(row);
    let column = sample_from(&probs, rng) as usize;
    let mut q = vec![0.0; lm.target_vocab().max(row.len())];
    for (i, &p) in probs.iter().enumerate() {
        q[token_at(lm, i)? as usize] = p;
    }
    draft.tokens.push(token_at(lm, column)?);
    draft.q.get_or_insert_with(Vec::new).push(q);
    Ok(())
}
