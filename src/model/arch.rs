//! The architectures the forward pass runs, and what sets each apart from llama. Everything
//! here is read from (or implied by) `general.architecture`; shapes come from the metadata.

/// A GGUF `general.architecture` the forward pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 1–3, SmolLM, Mistral (their GGUFs say `llama`; some say `mistral`).
    Llama,
    /// Qwen 2 / 2.5: biases on Q, K and V; NeoX rotary layout.
    Qwen2,
    /// Qwen 3: RMSNorm over each Q and K head before rotation; NeoX rotary layout.
    Qwen3,
    /// Gemma 3: Q/K norms, norms after attention and MLP too, GELU-tanh, embeddings scaled
    /// by √hidden, five sliding-window layers (their own rotary base) to one global.
    Gemma3,
}

/// The architectures named in the one-line refusal of any other.
pub const SUPPORTED: &str = "llama, mistral, qwen2, qwen3, gemma3";

/// How a head's rotary pairs are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i + 1): GGUF llama (its converter permutes Q and K to this).
    Interleaved,
    /// Pairs (i, i + d/2): GPT-NeoX, Qwen, Gemma.
    Neox,
}

/// The gated MLP's activation: `down(act(gate(x)) · up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU with the tanh approximation, as ggml computes it (an f16 table).
    GeluTanh,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "llama" | "mistral" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            "gemma3" => Some(Self::Gemma3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
        }
    }

    pub fn rope_style(self) -> RopeStyle {
        match self {
            Self::Llama => RopeStyle::Interleaved,
            _ => RopeStyle::Neox,
        }
    }

    pub fn activation(self) -> Activation {
        match self {
            Self::Gemma3 => Activation::GeluTanh,
            _ => Activation::Silu,
        }
    }

    /// Per-head RMSNorm of Q and K (weights `attn_q_norm`, `attn_k_norm`) before rotation.
    pub fn qk_norm(self) -> bool {
        matches!(self, Self::Qwen3 | Self::Gemma3)
    }

    /// RMSNorm of the attention and MLP outputs before each residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub fn post_norms(self) -> bool {
        self == Self::Gemma3
    }

    /// Layers in one sliding-window cycle: all but the last of each cycle attend within the
    /// window (llama.cpp's `set_swa_pattern`); 0 where every layer is global.
    pub fn swa_pattern(self) -> usize {
        match self {
            Self::Gemma3 => 6,
            _ => 0,
        }
    }

    /// The rotary base of sliding-window layers, where it differs from the global one
    /// (llama.cpp sets Gemma 3's, which its GGUF does not carry).
    pub fn local_rope_base(self) -> Option<f32> {
        match self {
            Self::Gemma3 => Some(10_000.0),
            _ => None,
        }
    }

    /// Whether the token embedding is multiplied by √hidden before the first layer.
    pub fn scales_embeddings(self) -> bool {
        self == Self::Gemma3
    }
}
