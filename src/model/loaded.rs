//! A model file opened for generation: weights plus the tokenizer from the same GGUF.

use std::path::Path;
use std::sync::Arc;

use crate::model::chat_template::{render_chat, ChatError, ChatMessage};
use crate::model::cuda::CudaError;
use crate::model::device::{self, cuda_devices, Agreement, DeviceChoice};
use crate::model::tokenizer::{Tokenizer, TokenizerError};
use crate::model::{CpuModel, GgufMetadata, MatmulBackend, ModelError, TargetBackend};
use specgate_strategies::TokenId;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("--device {device}: {error}")]
    Cuda {
        device: DeviceChoice,
        error: CudaError,
    },
    #[error(
        "--device {device} refused: its logits differ from the CPU's on the start-up check \
         ({agreement}); serve with --device cpu"
    )]
    SelfCheck {
        device: DeviceChoice,
        agreement: Agreement,
    },
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
        Self::assemble(Box::new(model), &metadata)
    }

    /// Load the target on `device`. A GPU is checked against the CPU before it is used
    /// ([`device::self_check`]); `auto` falls back to the CPU, saying why, where no GPU is
    /// found or the GPU fails to start.
    pub fn load_on(path: &Path, device: DeviceChoice) -> Result<Self, LoadError> {
        match device {
            DeviceChoice::Cpu => Self::load(path),
            DeviceChoice::Cuda(n) => Self::load_cuda(path, n, device),
            DeviceChoice::Auto if cuda_devices() == 0 => {
                eprintln!("specgate: --device auto: no CUDA device found, serving on the CPU");
                Self::load(path)
            }
            DeviceChoice::Auto => Self::load_cuda(path, 0, device).or_else(|e| {
                eprintln!("specgate: --device auto: {e}; serving on the CPU");
                Self::load(path)
            }),
        }
    }

    fn load_cuda(path: &Path, ordinal: usize, device: DeviceChoice) -> Result<Self, LoadError> {
        let (model, metadata) = cuda_model(path, ordinal, device)?;
        let mut lm = Self::assemble(model, &metadata)?;
        let mut cpu = Self::load(path)?;
        let ids = lm
            .prompt_ids(SELF_CHECK_PROMPT)
            .map_err(|e| ModelError::Invalid(format!("self-check prompt: {e}")))?;
        let agreement = device::self_check(cpu.model.as_mut(), lm.model.as_mut(), &ids)?;
        if !agreement.passes() {
            return Err(LoadError::SelfCheck { device, agreement });
        }
        eprintln!(
            "specgate: target on {}; start-up check against the CPU: {agreement}",
            lm.model.device()
        );
        Ok(lm)
    }

    fn assemble(model: Box<dyn TargetBackend>, metadata: &GgufMetadata) -> Result<Self, LoadError> {
        let tokenizer = Tokenizer::from_gguf_metadata(metadata)?;
        if tokenizer.vocab_size() != model.config().vocab_size {
            return Err(ModelError::Format(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                model.config().vocab_size
            ))
            .into());
        }
        Ok(Self {
            model,
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

/// The start-up check's prompt: long enough (> 16 tokens) to run the mat-vec kernels in more
/// than one chunk of rows.
const SELF_CHECK_PROMPT: &str =
    "Explain in two sentences why the sky looks blue during the day and red at sunset.";

#[cfg(feature = "cuda")]
fn cuda_model(
    path: &Path,
    ordinal: usize,
    device: DeviceChoice,
) -> Result<(Box<dyn TargetBackend>, GgufMetadata), LoadError> {
    use crate::model::cuda::{weights::CudaLoadError, CudaModel};
    match CudaModel::load(ordinal, path) {
        Ok((m, md)) => Ok((Box::new(m), md)),
        Err(CudaLoadError::Model(e)) => Err(LoadError::Model(e)),
        Err(CudaLoadError::Cuda(error)) => Err(LoadError::Cuda { device, error }),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_model(
    _path: &Path,
    _ordinal: usize,
    device: DeviceChoice,
) -> Result<(Box<dyn TargetBackend>, GgufMetadata), LoadError> {
    Err(LoadError::Cuda {
        device,
        error: CudaError::NotBuilt,
    })
}
