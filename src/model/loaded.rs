//! A model file opened for generation: weights plus the tokenizer from the same GGUF.

use std::path::Path;
use std::sync::Arc;

use crate::model::chat_template::{render_chat, ChatError, ChatMessage};
use crate::model::tokenizer::{Tokenizer, TokenizerError};
use crate::model::{CpuModel, MatmulBackend, ModelError, TargetBackend};
use specgate_strategies::TokenId;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

pub struct LoadedModel {
    /// The target, on the device it was loaded on.
    pub model: Box<dyn TargetBackend>,
    pub tokenizer: Arc<Tokenizer>,
}

impl LoadedModel {
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        Self::load_with(path, MatmulBackend::default())
    }

    pub fn load_with(path: &Path, backend: MatmulBackend) -> Result<Self, LoadError> {
        let (model, metadata) = CpuModel::load_with_metadata(path, backend)?;
        let tokenizer = Tokenizer::from_gguf_metadata(&metadata)?;
        if tokenizer.vocab_size() != model.config().vocab_size {
            return Err(ModelError::Format(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                model.config().vocab_size
            ))
            .into());
        }
        Ok(Self {
            model: Box::new(model),
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// The ids of one user turn: through the chat template where the model has one, else
    /// the text itself as a completion prompt (a base model), BOS first where wanted.
    pub fn prompt_ids(&self, user: &str) -> Result<Vec<TokenId>, PromptError> {
        let text = match self.tokenizer.chat_template() {
            Some(_) => self.chat_prompt(&[ChatMessage::new("user", user)])?,
            None => user.to_string(),
        };
        Ok(self.tokenizer.encode_prompt(&text)?)
    }

    /// The prompt text for a chat, from the model's template, ready to encode.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String, ChatError> {
        chat_prompt(&self.tokenizer, messages)
    }
}

/// The prompt text for a chat from the template in the tokenizer's GGUF.
pub fn chat_prompt(tok: &Tokenizer, messages: &[ChatMessage]) -> Result<String, ChatError> {
    let template = tok.chat_template().ok_or(ChatError::NoTemplate)?;
    let eos = tok.token_str(tok.eos()).unwrap_or_default();
    render_chat(template, messages, true, "", &eos)
}
