//! The GGUF tokenizer against llama.cpp's ids (fixtures made by
//! scripts/make_reference_fixtures.py), round trips and streaming decode.

mod common;

use serde::Deserialize;
use specgate::model::tokenizer::StreamDecoder;

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(&common::fixture("tokenizer_cases.json")).expect("fixture")
}

#[test]
fn ids_match_llama_cpp() {
    let lm = common::model();
    let cases = cases();
    assert!(cases.len() >= 10);
    for c in &cases {
        let ids = lm.tokenizer.encode(&c.text).unwrap();
        assert_eq!(ids, c.ids, "case {}: {:?}", c.name, c.text);
    }
}

#[test]
fn decode_round_trips_and_streaming_equals_one_shot() {
    let lm = common::model();
    let tok = &lm.tokenizer;
    for c in cases() {
        assert_eq!(
            tok.decode(&c.ids).unwrap(),
            c.text,
            "round trip of {}",
            c.name
        );
        let mut stream = StreamDecoder::new();
        let mut text = String::new();
        for &id in &c.ids {
            if let Some(piece) = stream.push(tok, id).unwrap() {
                assert!(
                    !piece.contains('\u{FFFD}'),
                    "{}: a broken character was streamed",
                    c.name
                );
                text += &piece;
            }
        }
        text += &stream.flush(tok).unwrap().unwrap_or_default();
        assert_eq!(text, c.text, "streamed {}", c.name);
    }
}

#[test]
fn known_ids_for_control_tokens() {
    let lm = common::model();
    let tok = &lm.tokenizer;
    assert_eq!(tok.eos(), 2);
    assert_eq!(tok.encode("<|im_end|>").unwrap(), vec![2]);
    assert_eq!(
        tok.encode("system").unwrap(),
        vec![9690],
        "no prefix space is added"
    );
    assert!(tok.is_special(1) && !tok.is_special(9690));
}

#[test]
fn token_bytes_are_what_each_token_decodes_to() {
    let lm = common::model();
    let tok = &lm.tokenizer;
    let mut whole = 0;
    for id in 0..tok.vocab_size() as u32 {
        let bytes = tok.token_bytes(id);
        assert!(!bytes.is_empty(), "token {id} has no bytes");
        // A token holding part of a character decodes lossily; the others exactly.
        if let Ok(text) = String::from_utf8(bytes) {
            assert_eq!(text, tok.decode(&[id]).unwrap(), "token {id}");
            whole += 1;
        }
    }
    assert!(whole > tok.vocab_size() * 9 / 10, "{whole} whole tokens");
    // Two tokens that split a character: their bytes join into it.
    let ids = tok.encode("café ☃").unwrap();
    let joined: Vec<u8> = ids.iter().flat_map(|&id| tok.token_bytes(id)).collect();
    assert_eq!(String::from_utf8(joined).unwrap(), "café ☃");
}
