//! Chat prompts rendered with the model's own Jinja chat template (minijinja), as
//! Hugging Face's `apply_chat_template` and llama.cpp do.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the model has no chat template")]
    NoTemplate,
    #[error("chat template: {0}")]
    Template(String),
}

/// Render `messages` with `template`; `add_generation_prompt` opens the assistant's turn.
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    let mut env = Environment::new();
    // Templates written for Hugging Face call raise_exception(); give them one.
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template)
        .map_err(|e| ChatError::Template(e.to_string()))?;
    let tmpl = env
        .get_template("chat")
        .map_err(|e| ChatError::Template(e.to_string()))?;
    tmpl.render(context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    })
    .map_err(|e| ChatError::Template(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn chatml_with_default_system_prompt() {
        let out = render_chat(CHATML, &[ChatMessage::new("user", "Hi")], true, "", "").unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let sys = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        let out = render_chat(CHATML, &sys, false, "", "").unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn raise_exception_becomes_an_error() {
        let t = "{{ raise_exception('only user and assistant roles') }}";
        assert!(matches!(
            render_chat(t, &[], true, "", ""),
            Err(ChatError::Template(_))
        ));
    }
}
