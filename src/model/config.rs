//! Hyper-parameters of a GGUF model, read from its metadata (`{arch}.*` keys).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::arch::{self, Arch};
use super::ModelError;

/// The longest context served: a model that declares more is served up to this (the rope
/// table is sized from it: 32 MiB at a head width of 64).
pub const MAX_CONTEXT: usize = 1 << 17;

/// What the forward pass needs to know about the network's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub rope_base: f32,
    /// Linear rotary scaling (`rope.scaling.type = linear`): positions times this.
    pub rope_freq_scale: f32,
    pub rms_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Keys a sliding-window layer's query sees (itself included), where the model has any.
    pub sliding_window: Option<usize>,
}

fn get<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a Value, ModelError> {
    md.get(key)
        .ok_or_else(|| ModelError::Metadata(format!("missing key {key}")))
}

fn get_u32(md: &HashMap<String, Value>, key: &str) -> Result<usize, ModelError> {
    get(md, key)?
        .to_u32()
        .map(|v| v as usize)
        .map_err(|e| ModelError::Metadata(format!("{key}: {e}")))
}

fn opt_u32(md: &HashMap<String, Value>, key: &str) -> Option<usize> {
    md.get(key)
        .and_then(|v| v.to_u32().ok())
        .map(|v| v as usize)
}

/// The architecture a file declares, refused in one line naming those supported.
pub fn architecture(md: &HashMap<String, Value>) -> Result<Arch, ModelError> {
    let name = get(md, "general.architecture")?
        .to_string()
        .map_err(|e| ModelError::Metadata(format!("general.architecture: {e}")))?;
    Arch::from_name(name).ok_or_else(|| {
        ModelError::Unsupported(format!(
            "architecture {name:?} (supported: {})",
            arch::SUPPORTED
        ))
    })
}

impl ModelConfig {
    /// Reads the `{arch}.*` keys; refuses other architectures with a clear error.
    pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let arch = architecture(md)?;
        let name = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .map_or(arch.name(), String::as_str);
        let key = |k: &str| format!("{name}.{k}");
        let n_heads = get_u32(md, &key("attention.head_count"))?;
        let hidden = get_u32(md, &key("embedding_length"))?;
        let n_kv_heads = opt_u32(md, &key("attention.head_count_kv")).unwrap_or(n_heads);
        let head_dim = match opt_u32(md, &key("attention.key_length")) {
            Some(k) => k,
            None if n_heads > 0 && hidden.is_multiple_of(n_heads) => hidden / n_heads,
            None => 0,
        };
        if n_heads == 0 || head_dim == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ModelError::Metadata(format!(
                "inconsistent heads: hidden {hidden}, heads {n_heads}, kv heads {n_kv_heads}"
            )));
        }
        if let Some(v) = opt_u32(md, &key("attention.value_length")).filter(|&v| v != head_dim) {
            return Err(ModelError::Unsupported(format!(
                "value heads of width {v} beside key heads of {head_dim}"
            )));
        }
        let f32_or = |k: &str, default: f32| {
            md.get(&key(k))
                .and_then(|v| v.to_f32().ok())
                .unwrap_or(default)
        };
        let vocab_size = match opt_u32(md, &key("vocab_size")) {
            Some(v) => v,
            None => get(md, "tokenizer.ggml.tokens")?
                .to_vec()
                .map_err(|e| ModelError::Metadata(format!("tokenizer.ggml.tokens: {e}")))?
                .len(),
        };
        let config = Self {
            arch,
            n_layers: get_u32(md, &key("block_count"))?,
            hidden,
            ffn: get_u32(md, &key("feed_forward_length"))?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim: opt_u32(md, &key("rope.dimension_count")).unwrap_or(head_dim),
            rope_base: f32_or("rope.freq_base", 10_000.0),
            rope_freq_scale: rope_scaling(md, &key)?,
            rms_eps: f32_or("attention.layer_norm_rms_epsilon", 1e-5),
            context_length: get_u32(md, &key("context_length"))
                .unwrap_or(2048)
                .min(MAX_CONTEXT),
            vocab_size,
            sliding_window: opt_u32(md, &key("attention.sliding_window"))
                .filter(|_| arch.swa_pattern() > 0),
        };
        config.check()?;
        Ok(config)
    }

    /// The window layer `l` attends within, or None for a global layer.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        let pattern = self.arch.swa_pattern();
        self.sliding_window
            .filter(|_| pattern > 0 && l % pattern < pattern - 1)
    }

    /// The rotary base and linear position scale of layer `l`: sliding-window layers of an
    /// architecture with a local base turn with it, unscaled (ggml scales only the global
    /// layers' positions, as Gemma 3's long-context files need).
    pub fn layer_rope(&self, l: usize) -> (f32, f32) {
        match (self.layer_window(l), self.arch.local_rope_base()) {
            (Some(_), Some(local)) => (local, 1.0),
            _ => (self.rope_base, self.rope_freq_scale),
        }
    }

    /// What the embedding rows are multiplied by before the first layer.
    pub fn embed_scale(&self) -> Option<f32> {
        self.arch
            .scales_embeddings()
            .then(|| (self.hidden as f32).sqrt())
    }

    /// Refuse shapes the forward pass cannot run (a rotary width past the head would index
    /// out of bounds on the first token) or would size absurd tables from.
    fn check(&self) -> Result<(), ModelError> {
        let bad = |what: String| Err(ModelError::Metadata(what));
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(format!(
                "rope.dimension_count {} must be even and in 2..={} (the head width)",
                self.rope_dim, self.head_dim
            ));
        }
        if self.sliding_window == Some(0) {
            // A query must see at least itself.
            return bad("attention.sliding_window is 0".into());
        }
        if self.context_length == 0 {
            return bad("context_length is 0".into());
        }
        if self.n_layers == 0 || self.ffn == 0 || self.vocab_size == 0 {
            return bad(format!(
                "empty network: {} layers, ffn {}, vocab {}",
                self.n_layers, self.ffn, self.vocab_size
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!("rope.freq_base {} must be > 1", self.rope_base));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!(
                "layer_norm_rms_epsilon {} must be >= 0",
                self.rms_eps
            ));
        }
        Ok(())
    }

    /// Floats one token occupies in the KV cache of one layer (K or V).
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Bytes a sequence's cache holds per token: keys and values, f16, every layer.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.n_layers * self.kv_width() * 2 * 2
    }
}

/// `rope.scaling.type`: none, or linear (positions scaled by 1/factor). YaRN and the other
/// schemes change the rotation itself and are refused rather than served wrongly.
fn rope_scaling(
    md: &HashMap<String, Value>,
    key: &dyn Fn(&str) -> String,
) -> Result<f32, ModelError> {
    let kind = md
        .get(&key("rope.scaling.type"))
        .and_then(|v| v.to_string().ok())
        .map_or("none", String::as_str);
    let factor = md
        .get(&key("rope.scaling.factor"))
        .and_then(|v| v.to_f32().ok())
        .unwrap_or(1.0);
    match kind {
        "none" => Ok(1.0),
        "linear" if factor.is_finite() && factor > 0.0 => Ok(1.0 / factor),
        other => Err(ModelError::Unsupported(format!(
            "rope scaling {other:?} with factor {factor} (supported: none, linear)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(extra: &[(&str, u32)]) -> HashMap<String, Value> {
        let mut md = HashMap::from([
            (
                "general.architecture".to_string(),
                Value::String("llama".into()),
            ),
            ("llama.attention.head_count".to_string(), Value::U32(9)),
            ("llama.attention.head_count_kv".to_string(), Value::U32(3)),
            ("llama.embedding_length".to_string(), Value::U32(576)),
            ("llama.block_count".to_string(), Value::U32(30)),
            ("llama.feed_forward_length".to_string(), Value::U32(1536)),
            ("llama.vocab_size".to_string(), Value::U32(49152)),
            ("llama.context_length".to_string(), Value::U32(8192)),
        ]);
        for (k, v) in extra {
            md.insert(k.to_string(), Value::U32(*v));
        }
        md
    }

    #[test]
    fn smollm2_shape_reads_and_impossible_shapes_are_refused() {
        let c = ModelConfig::from_metadata(&metadata(&[])).unwrap();
        assert_eq!((c.head_dim, c.rope_dim, c.context_length), (64, 64, 8192));
        for bad in [
            ("llama.rope.dimension_count", 128),
            ("llama.rope.dimension_count", 7),
            ("llama.rope.dimension_count", 0),
            ("llama.context_length", 0),
            ("llama.block_count", 0),
        ] {
            let e = ModelConfig::from_metadata(&metadata(&[bad])).unwrap_err();
            assert!(matches!(e, ModelError::Metadata(_)), "{bad:?}: {e}");
        }
        let mut md = metadata(&[]);
        md.insert("llama.rope.freq_base".into(), Value::F32(0.5));
        assert!(ModelConfig::from_metadata(&md).is_err(), "rope base 0.5");
        // A longer declared context is served up to MAX_CONTEXT.
        let long = ModelConfig::from_metadata(&metadata(&[("llama.context_length", u32::MAX)]));
        assert_eq!(long.unwrap().context_length, MAX_CONTEXT);
    }

    /// Gemma 3 270M's metadata: key heads wider than hidden / heads, five sliding-window
    /// layers (base 10 000) to one global (its own base), embeddings scaled by √640.
    #[test]
    fn gemma3_layers_windows_and_rotary_bases_read_from_the_metadata() {
        let mut md: HashMap<String, Value> = [
            ("attention.head_count", 4),
            ("attention.head_count_kv", 1),
            ("attention.key_length", 256),
            ("attention.value_length", 256),
            ("embedding_length", 640),
            ("block_count", 18),
            ("feed_forward_length", 2048),
            ("context_length", 32768),
            ("attention.sliding_window", 512),
            ("vocab_size", 262_144),
        ]
        .into_iter()
        .map(|(k, v)| (format!("gemma3.{k}"), Value::U32(v)))
        .collect();
        md.insert(
            "general.architecture".into(),
            Value::String("gemma3".into()),
        );
        md.insert("gemma3.rope.freq_base".into(), Value::F32(1e6));
        let c = ModelConfig::from_metadata(&md).unwrap();
        assert_eq!(
            (c.arch, c.head_dim, c.n_heads * c.head_dim),
            (Arch::Gemma3, 256, 1024)
        );
        let global: Vec<usize> = (0..18).filter(|&l| c.layer_window(l).is_none()).collect();
        assert_eq!(global, vec![5, 11, 17]);
        assert_eq!(c.layer_window(0), Some(512));
        assert_eq!((c.layer_rope(0).0, c.layer_rope(5).0), (10_000.0, 1e6));
        assert_eq!(c.embed_scale(), Some(640f32.sqrt()));
        // Value heads of another width, and YaRN, are refused rather than served wrongly.
        let mut odd = md.clone();
        odd.insert("gemma3.attention.value_length".into(), Value::U32(128));
        assert!(matches!(
            ModelConfig::from_metadata(&odd),
            Err(ModelError::Unsupported(_))
        ));
        // A window of 0 would hide a query from itself.
        let mut blind = md.clone();
        blind.insert("gemma3.attention.sliding_window".into(), Value::U32(0));
        assert!(matches!(
            ModelConfig::from_metadata(&blind),
            Err(ModelError::Metadata(_))
        ));
        md.insert(
            "gemma3.rope.scaling.type".into(),
            Value::String("yarn".into()),
        );
        let e = ModelConfig::from_metadata(&md).unwrap_err().to_string();
        assert!(
            e.contains("yarn") && e.contains("supported: none, linear"),
            "{e}"
        );
    }
}
