//! OpenAI's strict reading of a JSON schema, which xgrammar (vLLM's default) also uses: an
//! object schema that declares `properties` but says nothing of `additionalProperties` allows
//! no other keys. Read literally (JSON Schema's default is `true`), such a schema lets a
//! small model add keys until `max_tokens`, repeating them. Pure.

use serde_json::Value;

/// Keywords whose value is one subschema.
const ONE: [&str; 7] = [
    "items",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
];
/// Keywords whose value is a list of subschemas.
const LIST: [&str; 4] = ["prefixItems", "anyOf", "oneOf", "items"];
/// Keywords whose value maps names to subschemas.
const MAP: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// `schema` with `"additionalProperties": false` added to every object schema that declares
/// `properties` and leaves other keys unsaid (no `additionalProperties`, `patternProperties`
/// or `unevaluatedProperties`). `allOf` branches are left open: each branch alone closed
/// would refuse the other branches' keys.
pub fn closed(mut schema: Value) -> Value {
    close(&mut schema, true);
    schema
}

fn close(schema: &mut Value, this_level: bool) {
    let Value::Object(o) = schema else {
        return;
    };
    let open = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
        "allOf",
    ]
    .iter()
    .all(|k| !o.contains_key(*k));
    if this_level && open && o.get("properties").is_some_and(Value::is_object) {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ONE {
        if let Some(sub) = o.get_mut(key).filter(|s| s.is_object()) {
            close(sub, true);
        }
    }
    for key in LIST {
        if let Some(Value::Array(subs)) = o.get_mut(key) {
            subs.iter_mut().for_each(|s| close(s, true));
        }
    }
    if let Some(Value::Array(subs)) = o.get_mut("allOf") {
        subs.iter_mut().for_each(|s| close(s, false));
    }
    if let Some(sub) = o.get_mut("additionalProperties").filter(|s| s.is_object()) {
        close(sub, true);
    }
    for key in MAP {
        if let Some(Value::Object(subs)) = o.get_mut(key) {
            subs.values_mut().for_each(|s| close(s, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declared_objects_close_and_open_ones_stay_open() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {}}}},
                "extra": {"type": "object", "properties": {}, "additionalProperties": true},
                "any": {"type": "object"},
            },
            "$defs": {"pt": {"properties": {"x": {"type": "number"}}}},
            "anyOf": [{"properties": {"a": {}}}],
            "allOf": [{"properties": {"b": {}}}],
        });
        let c = closed(schema);
        // The root has allOf: its keys come from the branches too, so it stays open.
        assert_eq!(c.get("additionalProperties"), None);
        let city = &c["properties"];
        assert_eq!(city["tags"]["items"]["additionalProperties"], false);
        assert_eq!(city["extra"]["additionalProperties"], true);
        assert_eq!(city["any"].get("additionalProperties"), None);
        assert_eq!(c["$defs"]["pt"]["additionalProperties"], false);
        assert_eq!(c["anyOf"][0]["additionalProperties"], false);
        assert_eq!(c["allOf"][0].get("additionalProperties"), None);
        let plain = closed(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
        assert_eq!(plain["additionalProperties"], false);
        assert_eq!(closed(json!(true)), json!(true));
    }
}
