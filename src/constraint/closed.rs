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

/// Keywords that combine a schema with others: an object beside them takes keys from them
/// too, so closing it (or, when it declares properties, the branches) would refuse those.
const COMBINED: [&str; 7] = [
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "if",
    "dependentSchemas",
    "dependencies",
];

/// `schema` with `"additionalProperties": false` added to every object schema that declares
/// `properties` and leaves other keys unsaid (no `additionalProperties`, `patternProperties`
/// or `unevaluatedProperties`). An object combined with others (`allOf`, `anyOf`, `oneOf`,
/// `$ref`, `if`, …) stays open, and so do the branches of one that declares properties of its
/// own: each closed alone would refuse the other's keys. The branches of a bare `anyOf` or
/// `oneOf` (a union of whole objects) are closed.
pub fn closed(mut schema: Value) -> Value {
    close(&mut schema, true);
    schema
}

fn close(schema: &mut Value, this_level: bool) {
    let Value::Object(o) = schema else {
        return;
    };
    let declares = o.get("properties").is_some_and(Value::is_object);
    let combined = COMBINED.iter().any(|k| o.contains_key(*k));
    let open = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
    ]
    .iter()
    .all(|k| !o.contains_key(*k));
    if this_level && open && declares && !combined {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    // Branches that share this object's keys stay open at their own level.
    let branches_close = !declares;
    for key in ONE {
        if let Some(sub) = o.get_mut(key).filter(|s| s.is_object()) {
            // Closing what `not` refuses would let through what it meant to refuse.
            let this = match key {
                "not" => false,
                "if" | "then" | "else" => branches_close,
                _ => true,
            };
            close(sub, this);
        }
    }
    for key in LIST {
        if let Some(Value::Array(subs)) = o.get_mut(key) {
            let branch = matches!(key, "anyOf" | "oneOf");
            subs.iter_mut()
                .for_each(|s| close(s, !branch || branches_close));
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
            let branch = key == "dependentSchemas";
            subs.values_mut().for_each(|s| close(s, !branch));
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
            "oneOf": [{"properties": {"a": {}}}],
        });
        let c = closed(schema);
        // The root takes keys from its oneOf branch too: it and the branch stay open.
        assert_eq!(c.get("additionalProperties"), None);
        assert_eq!(c["oneOf"][0].get("additionalProperties"), None);
        let city = &c["properties"];
        assert_eq!(city["tags"]["items"]["additionalProperties"], false);
        assert_eq!(city["extra"]["additionalProperties"], true);
        assert_eq!(city["any"].get("additionalProperties"), None);
        assert_eq!(c["$defs"]["pt"]["additionalProperties"], false);
        // A union of whole objects: each branch closes.
        let union =
            closed(json!({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}));
        assert_eq!(union["anyOf"][1]["additionalProperties"], false);
        let all = closed(json!({"allOf": [{"properties": {"b": {}}}], "properties": {"c": {}}}));
        assert_eq!(all.get("additionalProperties"), None);
        assert_eq!(all["allOf"][0].get("additionalProperties"), None);
        let plain = closed(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
        assert_eq!(plain["additionalProperties"], false);
        assert_eq!(closed(json!(true)), json!(true));
    }
}
