//! Head 0's top-1 accuracy through the draft LM-head cut as shipped (Q8_0) and requantized to
//! Q4_0, on greedy continuations of the shipped prompts: `cut_probe [prompts per set]`.

use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use specgate::heads::bundle;
use specgate::model::chat_template::ChatMessage;
use specgate::model::loaded::LoadedModel;
use specgate::model::{
    lm_head_tensor, select_rows, BatchItem, ForwardOptions, Linear, LogitRows, MatmulBackend,
};
use specgate_strategies::argmax;

fn main() -> anyhow::Result<()> {
    let per_set: usize = std::env::args().nth(1).map_or(Ok(6), |s| s.parse())?;
    let path = Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut lm = LoadedModel::load(path)?;
    let bundle = bundle::load(&bundle::default_dir(path), path)?;
    let (head, _) = lm_head_tensor(path)?;
    let q8 = select_rows(&head, bundle.draft_vocab.ids())?;
    let q4 = QTensor::quantize(&q8.dequantize(&Device::Cpu)?, GgmlDType::Q4_0)?;
    let cuts = [
        Linear::new(q8, MatmulBackend::Kernels)?,
        Linear::new(q4, MatmulBackend::Kernels)?,
    ];
    let ids = bundle.draft_vocab.ids().to_vec();
    let (mut n, mut right, mut agree) = (0usize, [0usize; 2], 0usize);
    for set in ["code_edit", "rag", "creative", "chat"] {
        let text = std::fs::read_to_string(format!("tests/fixtures/prompts/{set}.jsonl"))?;
        for line in text.lines().take(per_set) {
            let v: serde_json::Value = serde_json::from_str(line)?;
            let msg = ChatMessage {
                role: "user".into(),
                content: v["prompt"].as_str().unwrap_or("").into(),
            };
            let mut toks = lm.tokenizer.encode(&lm.chat_prompt(&[msg])?)?;
            let seq = lm.model.new_sequence();
            let mut out = lm.model.forward_one(seq, &toks, LogitRows::Last)?;
            let mut hidden = Vec::new();
            for _ in 0..64 {
                let next = argmax(out.row(0, 0));
                toks.push(next);
                let item = BatchItem {
                    seq,
                    tokens: &toks[toks.len() - 1..],
                    logits: LogitRows::Last,
                    tree: None,
                };
                out = lm.model.forward(
                    &[item],
                    ForwardOptions {
                        hidden: true,
                        ..Default::default()
                    },
                )?;
                hidden.push((next, out.item_hidden(0).to_vec()));
            }
            lm.model.release(seq);
            // hidden[j]: the row fed token x_j, whose logits chose the pending token x_{j+1};
            // head 0 guesses the token after it, x_{j+2}.
            for j in 0..hidden.len() - 2 {
                let h = &hidden[j].1;
                let (pending, truth) = (&hidden[j + 1].0, hidden[j + 2].0);
                let e = bundle.lm_head.token_row(*pending)?;
                let s = bundle.heads.state(0, h, e.as_deref(), e.as_deref());
                let guess: Vec<u32> = cuts
                    .iter()
                    .map(|c| Ok(ids[argmax(&c.forward(&s)?) as usize]))
                    .collect::<anyhow::Result<_>>()?;
                n += 1;
                agree += usize::from(guess[0] == guess[1]);
                for k in 0..2 {
                    right[k] += usize::from(guess[k] == truth);
                }
            }
        }
    }
    let pct = |x: usize| 100.0 * x as f64 / n as f64;
    println!(
        "{n} places: head 0 top-1 Q8_0 cut {:.1}%, Q4_0 cut {:.1}%, same guess {:.1}%",
        pct(right[0]),
        pct(right[1]),
        pct(agree)
    );
    Ok(())
}
