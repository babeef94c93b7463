//! Output constraints: a JSON schema, any JSON object, a regex or a Lark grammar, compiled
//! by llguidance (the library vLLM, SGLang and llama.cpp use for structured output) into a
//! per-request [`TokenConstraint`] that masks the target's rows. How speculation stays
//! exact under it lives in `specgate_strategies::constraint`; tool calls build their
//! grammar in [`tools`].
//!
//! Compilation runs in the request's handler, not on the engine thread, so a bad schema is
//! a 400 before anything reaches the engine, and a grammar whose first mask cannot be
//! computed within llguidance's limits is refused there too.

pub mod closed;
pub mod tok_env;
pub mod tools;

use std::sync::{Arc, OnceLock};

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use specgate_strategies::{ConstraintError, TokenConstraint, TokenId, TokenMask};

use crate::model::tokenizer::Tokenizer;

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against a schema.
    JsonSchema(Value),
    /// Text matching a regular expression (Rust `regex` syntax).
    Regex(String),
    /// A grammar in llguidance's Lark dialect (which can embed `%json{…}` schemas).
    Lark(String),
}

/// A grammar the request gave cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrammarError {
    #[error("{0}")]
    Invalid(String),
    #[error("the grammar engine could not start for this model: {0}")]
    Setup(String),
}

/// How JSON is laid out unless a schema says otherwise (`x-guidance`): one space after
/// `,` and `:`, none elsewhere, as models mostly write it. Flexible whitespace would let a
/// small model pad an answer with newlines until max_tokens.
fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

impl GrammarSpec {
    fn to_llguidance(&self) -> Result<TopLevelGrammar, GrammarError> {
        Ok(match self {
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(with_layout(json!({"type": "object"}))?)
            }
            GrammarSpec::JsonSchema(s) => {
                TopLevelGrammar::from_json_schema(with_layout(s.clone())?)
            }
            GrammarSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        })
    }
}

/// The schema with specgate's JSON layout, unless it sets its own.
pub fn with_layout(mut schema: Value) -> Result<Value, GrammarError> {
    match &mut schema {
        Value::Object(o) => {
            o.entry("x-guidance").or_insert_with(json_layout);
            Ok(schema)
        }
        Value::Bool(true) => Ok(json!({"x-guidance": json_layout()})),
        _ => Err(GrammarError::Invalid(
            "a JSON schema must be an object".into(),
        )),
    }
}

/// Compiles grammars for one model's vocabulary (built once: it indexes every token).
pub struct Grammars {
    factory: ParserFactory,
    vocab: usize,
}

impl Grammars {
    pub fn new(tokenizer: Arc<Tokenizer>, vocab: usize) -> Result<Self, GrammarError> {
        let env = tok_env::ModelTokEnv::env(tokenizer, vocab);
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Setup(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(Self { factory, vocab })
    }

    /// A fresh constraint for one sequence, its first mask computed (a grammar that cannot
    /// produce one, or allows nothing, is refused here).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Box<dyn TokenConstraint>, GrammarError> {
        let parser = self
            .factory
            .create_parser(spec.to_llguidance()?)
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        let mut c = Llg {
            matcher: Matcher::new(Ok(parser)),
            vocab: self.vocab,
            eos: self.factory.tok_env().tok_trie().eos_token(),
            ended: 0,
            ready: None,
        };
        let first = c.mask().map_err(|e| GrammarError::Invalid(e.0))?;
        if first.count() == 0 {
            return Err(GrammarError::Invalid("the grammar allows no output".into()));
        }
        probe(c.fork(), &first, self.vocab).map_err(|e| GrammarError::Invalid(e.0))?;
        // Checked here, used for the sequence's first token: not computed twice.
        c.ready = Some(first);
        Ok(Box::new(c))
    }
}

/// Steps a copy of a new constraint walks before admission (forced tokens, else the first
/// allowed one).
const PROBE_STEPS: usize = 3;

/// Walk a copy of the constraint a few tokens in, under the same limits as generation: a
/// grammar that compiles but exceeds them on its first tokens (`a{1000000}`,
/// `((a{100}){100}){100}`, a choice of 5,000 strings all failed on the first token
/// consumed) is the client's error before admission, not a failed answer.
fn probe(
    mut c: Box<dyn TokenConstraint>,
    first: &TokenMask,
    vocab: usize,
) -> Result<(), ConstraintError> {
    let mut mask = first.clone();
    for step in 0..PROBE_STEPS {
        let next = c
            .forced()
            .first()
            .copied()
            .or_else(|| (0..vocab as TokenId).find(|&t| mask.allows(t)));
        let Some(token) = next else {
            return Ok(());
        };
        c.consume(&[token])?;
        if step + 1 < PROBE_STEPS {
            mask = c.mask()?;
        }
    }
    Ok(())
}

/// The grammar engine, built on first need or by [`LazyGrammars::warm`] (it indexes every
/// token of the vocabulary: 95 ms for SmolLM2's 49 152).
pub struct LazyGrammars {
    tokenizer: Arc<Tokenizer>,
    vocab: usize,
    cell: OnceLock<Result<Grammars, GrammarError>>,
}

impl LazyGrammars {
    pub fn new(tokenizer: Arc<Tokenizer>, vocab: usize) -> Arc<Self> {
        Arc::new(Self {
            tokenizer,
            vocab,
            cell: OnceLock::new(),
        })
    }

    /// The engine (a caller arriving while it is being built waits for it).
    pub fn get(&self) -> Result<&Grammars, GrammarError> {
        self.cell
            .get_or_init(|| Grammars::new(Arc::clone(&self.tokenizer), self.vocab))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Build it now on a thread of its own, so the first constrained request does not pay.
    pub fn warm(self: &Arc<Self>) {
        let me = Arc::clone(self);
        std::thread::spawn(move || {
            if let Err(e) = me.get() {
                eprintln!("specgate: structured output is unavailable: {e}");
            }
        });
    }
}

/// llguidance's limits, tightened where a request could make one step slow: the work of
/// one mask is bounded (about 10 ms at llguidance's measured rates) so a pathological
/// grammar fails its request rather than stalling every sequence in the batch.
/// Errors stay short: llguidance's verbose ones append the parser's state and the whole
/// grammar, which a client can do nothing with (and which can be long).
fn limits() -> ParserLimits {
    ParserLimits {
        step_lexer_fuel: 100_000,
        step_max_items: 25_000,
        max_grammar_size: 200_000,
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

/// One sequence's grammar state.
struct Llg {
    matcher: Matcher,
    vocab: usize,
    eos: TokenId,
    /// End-of-sequence tokens consumed: kept here, not in the matcher, which refuses tokens
    /// once its grammar is complete and cannot roll one back (a draft may hold EOS and be
    /// rejected).
    ended: usize,
    /// The mask of the current state when already known (the first one, computed at
    /// admission); any move of the state drops it.
    ready: Option<TokenMask>,
}

/// The parser's error, its first line only (the rest is llguidance's `<non-verbose/>` mark
/// or, verbose, its internal state).
fn fail(e: impl std::fmt::Display) -> ConstraintError {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    ConstraintError(first.to_string())
}

impl TokenConstraint for Llg {
    fn mask(&mut self) -> Result<TokenMask, ConstraintError> {
        if let Some(m) = self.ready.take() {
            return Ok(m);
        }
        if self.ended > 0 {
            return Ok(TokenMask::only(self.vocab, &[self.eos]));
        }
        let m = self.matcher.compute_mask_or_eos().map_err(fail)?;
        Ok(TokenMask::from_words(m.as_slice().to_vec(), self.vocab))
    }

    fn consume(&mut self, tokens: &[TokenId]) -> Result<(), ConstraintError> {
        self.ready = None;
        let grammar = tokens
            .iter()
            .position(|&t| t == self.eos)
            .unwrap_or(tokens.len());
        if self.ended > 0 && grammar > 0 {
            return Err(ConstraintError(
                "a token after the end of the output".into(),
            ));
        }
        self.matcher
            .consume_tokens(&tokens[..grammar])
            .map_err(fail)?;
        match tokens[grammar..].iter().all(|&t| t == self.eos) {
            true => {
                self.ended += tokens.len() - grammar;
                Ok(())
            }
            false => Err(ConstraintError(
                "a token after the end of the output".into(),
            )),
        }
    }

    fn rollback(&mut self, n: usize) -> Result<(), ConstraintError> {
        self.ready = None;
        let ends = n.min(self.ended);
        self.ended -= ends;
        if n == ends {
            return Ok(());
        }
        self.matcher.rollback(n - ends).map_err(fail)
    }

    fn forced(&mut self) -> Vec<TokenId> {
        if self.ended > 0 || self.matcher.is_stopped() {
            return Vec::new();
        }
        self.matcher.compute_ff_tokens()
    }

    fn fork(&self) -> Box<dyn TokenConstraint> {
        Box::new(Llg {
            matcher: self.matcher.clone(),
            vocab: self.vocab,
            eos: self.eos,
            ended: self.ended,
            ready: self.ready.clone(),
        })
    }
}

#[cfg(test)]
mod error_tests {
    #[test]
    fn a_parser_error_reaches_the_client_without_the_parsers_state() {
        let verbose = "lexer error: too many expressions constructed\n<state>\nTokens: …\n\
                       </state><grammar>\nstart: …\n</grammar>";
        let short = "lexer error: too many expressions constructed\n<non-verbose/>";
        for e in [verbose, short] {
            assert_eq!(
                super::fail(e).0,
                "lexer error: too many expressions constructed"
            );
        }
    }
}
