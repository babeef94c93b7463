//! A model file opened for generation: weights plus the tokenizer from the same GGUF.

use std::path::Path;

use crate::chat::{render_chat, ChatError, ChatMessage};
use crate::model::{MatmulBackend, Model, ModelError};
use crate::tokenizer::{Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

pub struct LoadedModel {
    pub model: Model,
    pub tokenizer: Tokenizer,
}

impl LoadedModel {
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        Self::load_with(path, MatmulBackend::default())
    }

    pub fn load_with(path: &Path, backend: MatmulBackend) -> Result<Self, LoadError> {
        let (model, metadata) = Model::load_with_metadata(path, backend)?;
        let tokenizer = Tokenizer::from_gguf_metadata(&metadata)?;
        if tokenizer.vocab_size() != model.config().vocab_size {
            return Err(ModelError::Format(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                model.config().vocab_size
            ))
            .into());
        }
        Ok(Self { model, tokenizer })
    }

    /// The prompt text for a chat, from the model's template, ready to encode.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String, ChatError> {
        let template = self
            .tokenizer
            .chat_template()
            .ok_or(ChatError::NoTemplate)?;
        let eos = self
            .tokenizer
            .token_str(self.tokenizer.eos())
            .unwrap_or_default();
        render_chat(template, messages, true, "", &eos)
    }
}
