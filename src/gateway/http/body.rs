//! A request's body: read with a size limit, then parsed into the endpoint's type, every
//! field it does not know refused by name and every wrong type named by its path.

use actix_web::web;
use bytes::Bytes;
use futures_util::StreamExt;

use serde_json::Value;

use crate::gateway::error::ApiError;
use crate::gateway::http::requests::{is_empty_value, RequestBody, COMMON_FIELDS};

/// The body, refused with 413 past the limit (before any of it is parsed).
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(None, format!("reading the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Parse a JSON body into `T`: a 400 with serde's explanation when it is not JSON or a field
/// has the wrong type, and a 400 naming the field when it is one `T` does not know.
pub fn parse_body<T: RequestBody>(body: &[u8]) -> Result<T, ApiError> {
    let mut value = Value::Object(json_object(body)?);
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::internal("a JSON object is an object"));
    };
    let others: Vec<String> = obj
        .keys()
        .filter(|k| !T::OWN_FIELDS.contains(&k.as_str()) && !COMMON_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for field in others {
        match neutral(&field, &obj[&field]) {
            Some(true) => {
                obj.remove(&field);
            }
            Some(false) => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!("`{field}` is not supported; only its neutral value is accepted"),
                )
                .with_code("unsupported_parameter"))
            }
            None => {
                return Err(
                    ApiError::invalid(Some(&field), format!("unknown field `{field}`"))
                        .with_code("unknown_field"),
                )
            }
        }
    }
    match serde_path_to_error::deserialize::<_, T>(&value) {
        Ok(t) => Ok(t),
        // Fields read through `#[serde(flatten)]` lose their path: find the field alone.
        Err(e) if e.path().to_string() == "." => Err(field_alone::<T>(&value).map_or_else(
            || type_error(None, e.inner()),
            |(k, e)| type_error(Some(&k), &e),
        )),
        Err(e) => Err(type_error(Some(&e.path().to_string()), e.inner())),
    }
}

/// A body that must be a JSON object: 400s saying what it is instead.
pub fn json_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid(
            None,
            "the request body is empty; expected JSON",
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(None, format!("the request body is not valid JSON: {e}"))
            .with_code("invalid_json")
    })?;
    match value {
        Value::Object(o) => Ok(o),
        _ => Err(ApiError::invalid(
            None,
            "the request body must be a JSON object",
        )),
    }
}

/// The first top-level field that fails to parse on its own, and why (a missing field is
/// not its fault).
fn field_alone<T: RequestBody>(body: &Value) -> Option<(String, serde_json::Error)> {
    body.as_object()?.iter().find_map(|(k, v)| {
        let alone = Value::Object(serde_json::Map::from_iter([(k.clone(), v.clone())]));
        match serde_json::from_value::<T>(alone) {
            Err(e) if !e.to_string().starts_with("missing field") => Some((k.clone(), e)),
            _ => None,
        }
    })
}

/// A body field of the wrong type or range, named by its path (`messages[0].content`).
fn type_error(path: Option<&str>, e: &serde_json::Error) -> ApiError {
    let inner = e.to_string();
    let why = if inner.contains("untagged enum Content") {
        "must be a string or a list of content parts".to_string()
    } else if inner.contains("floating point") && inner.contains("expected i64") {
        "must be an integer from -2^63 to 2^63 - 1".to_string()
    } else if inner.contains("floating point") && inner.contains("expected u64") {
        "must be an integer from 0 to 2^64 - 1".to_string()
    } else {
        inner
    };
    let message = match path {
        Some(p) => format!("`{p}`: {why}"),
        None => format!("invalid request body: {why}"),
    };
    ApiError::invalid(path, message).with_code("invalid_type")
}

/// Whether `v` is the value of an OpenAI field specgate does not implement that changes
/// nothing (None: not such a field). Clients and UIs often send these as a matter of
/// course; any other value is refused, since ignoring it would change the answer.
fn neutral(field: &str, v: &serde_json::Value) -> Option<bool> {
    let null = v.is_null();
    let zero = |v: &serde_json::Value| v.as_f64() == Some(0.0);
    Some(match field {
        "tools" | "functions" => is_empty_value(v),
        "tool_choice" | "function_call" => null || v == "none" || v == "auto",
        "parallel_tool_calls" => null || v.is_boolean(),
        "top_logprobs" => null || zero(v),
        "store" => null || v == false,
        "metadata" => null || v.is_object(),
        "service_tier" => null || v == "auto" || v == "default",
        "modalities" => null || v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
        // Hints that change latency or bookkeeping, never the answer.
        "prompt_cache_key" | "safety_identifier" => true,
        // Known, and not implemented at any value but null.
        "reasoning_effort" | "verbosity" | "audio" | "web_search_options" => null,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::http::requests::{ChatRequest, CompletionRequest};
    use serde_json::json;

    #[test]
    fn only_neutral_values_of_unimplemented_fields_pass() {
        let cases = [
            ("tools", json!([]), Some(true)),
            ("tools", json!([{"type": "function"}]), Some(false)),
            // Implemented: any value is the endpoint's to validate.
            ("logit_bias", json!({"50256": -100}), None),
            // Chat implements it; to completions only the neutral value is known.
            ("top_logprobs", json!(0.0), Some(true)),
            ("top_logprobs", json!(2), Some(false)),
            ("prompt_cache_key", json!("k"), Some(true)),
            // Implemented, so not a neutral-only field.
            (
                "prediction",
                json!({"type": "content", "content": "x"}),
                None,
            ),
            ("reasoning_effort", json!(null), Some(true)),
            ("reasoning_effort", json!("high"), Some(false)),
            ("temprature", json!(0), None),
        ];
        for (field, value, want) in cases {
            assert_eq!(neutral(field, &value), want, "{field}: {value}");
        }
    }

    #[test]
    fn a_known_unimplemented_field_is_unsupported_and_a_typo_unknown() {
        let code = |body: serde_json::Value| {
            parse_body::<CompletionRequest>(body.to_string().as_bytes())
                .err()
                .and_then(|e| e.code)
        };
        let base = json!({"model": "m", "prompt": "x"});
        let with = |k: &str, v: serde_json::Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        assert_eq!(code(with("tools", json!([]))), None);
        assert_eq!(
            code(with("reasoning_effort", json!("low"))),
            Some("unsupported_parameter")
        );
        assert_eq!(code(with("temprature", json!(0))), Some("unknown_field"));
        let mut obfuscated = base.clone();
        obfuscated["stream_options"] = json!({"include_usage": true, "include_obfuscation": false});
        assert_eq!(code(obfuscated), None);
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_by_its_path() {
        let param = |body: &str| {
            parse_body::<ChatRequest>(body.as_bytes())
                .err()
                .and_then(|e| e.param)
        };
        let msgs = r#""messages": [{"role": "user", "content": "Hi"}]"#;
        // Read through `flatten`: found field by field.
        let seed = format!(r#"{{"model": "m", {msgs}, "seed": 1180591620717411303424}}"#);
        assert_eq!(param(&seed).as_deref(), Some("seed"));
        let hot = format!(r#"{{"model": "m", {msgs}, "temperature": "hot"}}"#);
        assert_eq!(param(&hot).as_deref(), Some("temperature"));
        let five = r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#;
        assert_eq!(param(five).as_deref(), Some("messages[0].content"));
        assert_eq!(param(&format!(r#"{{"model": "m", {msgs}}}"#)), None);
    }
}
