//! Every input schema of eval/catalog compiles and judges generated
//! arguments right; schemas that would need a fetch do not compile; hostile
//! schemas return; problems name the field and mask values for logs.

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{Schema, check, compile, summary};

fn raw(value: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap()
}

fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..16 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(p) if p.starts_with('#') => match root.pointer(&p[1..]) {
                Some(target) => schema = target,
                None => return schema,
            },
            _ => return schema,
        }
    }
    schema
}

fn matching(pattern: &str) -> Option<String> {
    let regex = regex::Regex::new(pattern).ok()?;
    [
        "example.com",
        "a",
        "abc",
        "00000000-0000-0000-0000-000000000000",
        "a.b",
    ]
    .into_iter()
    .find(|s| regex.is_match(s))
    .map(str::to_owned)
}

/// A small value `schema` accepts: required properties only, the first
/// enum value or alternative, numbers and lengths at their bounds.
fn sample(schema: &Value, root: &Value, depth: usize) -> Value {
    let schema = resolve(schema, root);
    if depth > 12 {
        return Value::Null;
    }
    let Some(object) = schema.as_object() else {
        return json!("x");
    };
    if let Some(value) = object.get("const") {
        return value.clone();
    }
    if let Some(first) = object
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    for alternatives in ["anyOf", "oneOf"] {
        if let Some(branches) = object.get(alternatives).and_then(Value::as_array) {
            let branch = branches
                .iter()
                .find(|b| resolve(b, root).get("type") != Some(&json!("null")))
                .or(branches.first());
            if let Some(branch) = branch {
                return sample(branch, root, depth + 1);
            }
        }
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ => "string",
    };
    let number = |integer: bool| {
        let bound = |key: &str| object.get(key).and_then(Value::as_f64);
        let low = bound("minimum")
            .or(bound("exclusiveMinimum").map(|e| if integer { e.floor() + 1.0 } else { e + 0.5 }))
            .unwrap_or(1.0);
        let high = bound("maximum").or(bound("exclusiveMaximum").map(|e| e - 1.0));
        let value = high.map_or(low, |high| low.min(high));
        if integer {
            json!(value.ceil() as i64)
        } else {
            json!(value)
        }
    };
    match kind {
        "object" => {
            let properties = object.get("properties").and_then(Value::as_object);
            let mut out = Map::new();
            for name in object
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let property = properties
                    .and_then(|p| p.get(name))
                    .unwrap_or(&Value::Bool(true));
                out.insert(name.to_owned(), sample(property, root, depth + 1));
            }
            Value::Object(out)
        }
        "array" => {
            let count = object.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let items = object.get("items").unwrap_or(&Value::Bool(true));
            Value::Array((0..count).map(|_| sample(items, root, depth + 1)).collect())
        }
        "integer" => number(true),
        "number" => number(false),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => {
            if let Some(pattern) = object.get("pattern").and_then(Value::as_str) {
                return matching(pattern).map_or(Value::Null, Value::String);
            }
            if object.get("format").and_then(Value::as_str) == Some("uuid") {
                return json!("00000000-0000-0000-0000-000000000000");
            }
            let length = object.get("minLength").and_then(Value::as_u64).unwrap_or(1);
            json!("x".repeat(usize::try_from(length).unwrap_or(1).max(1)))
        }
    }
}

#[test]
fn every_recorded_tool_schema_compiles_and_judges_arguments() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/catalog");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let (mut tools, mut wrong_typed, mut missing) = (0, 0, 0);
    let mut failures = Vec::new();
    for file in files {
        let server: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for tool in server["tools"].as_array().unwrap() {
            tools += 1;
            let name = format!(
                "{}.{}",
                server["server"].as_str().unwrap_or("?"),
                tool["name"]
            );
            let validator = match compile(&raw(tool)) {
                Schema::Checks(validator) => validator,
                Schema::Unusable(why) => {
                    failures.push(format!("{name}: does not compile: {why}"));
                    continue;
                }
            };
            let schema = &tool["inputSchema"];
            let valid = sample(schema, schema, 0);
            let problems = check(&validator, &valid);
            if !problems.is_empty() {
                failures.push(format!(
                    "{name}: {valid} refused: {}",
                    summary(&problems, false)
                ));
                continue;
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if let Some(first) = required.first() {
                let mut without = valid.clone();
                without.as_object_mut().unwrap().remove(*first);
                let pointer = format!("/{first}");
                if !check(&validator, &without)
                    .iter()
                    .any(|p| p.path == pointer && p.keyword == "required")
                {
                    failures.push(format!("{name}: leaving out {first} was not named"));
                }
                missing += 1;
            }
            let typed =
                schema["properties"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .find(|(_, property)| {
                        resolve(property, schema)
                            .get("type")
                            .is_some_and(Value::is_string)
                    });
            if let Some((property, _)) = typed {
                let pointer = format!("/{property}");
                let refused = [
                    json!(12345),
                    json!("wrong"),
                    json!(true),
                    json!([1]),
                    json!({"x": 1}),
                ]
                .into_iter()
                .any(|wrong| {
                    let mut arguments = valid.clone();
                    arguments[property.as_str()] = wrong;
                    check(&validator, &arguments)
                        .iter()
                        .any(|p| p.path == pointer)
                });
                if !refused {
                    failures.push(format!("{name}: no wrong type for {property} was refused"));
                }
                wrong_typed += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {tools}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(tools, 418);
    assert!(
        missing > 250 && wrong_typed > 300,
        "{missing} {wrong_typed}"
    );
}

#[test]
fn references_outside_the_schema_never_fetch() {
    for schema in [
        json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}),
        json!({"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}),
        json!({"$schema": "https://example.com/my-meta-schema", "type": "object"}),
    ] {
        assert!(matches!(
            compile(&raw(&json!({"name": "t", "inputSchema": schema}))),
            Schema::Unusable(_)
        ));
    }
}

#[test]
fn a_problem_names_the_field_and_masks_values_for_logs() {
    let tool = json!({"name": "t", "inputSchema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["name"],
    }});
    let Schema::Checks(validator) = compile(&raw(&tool)) else {
        panic!("compiles")
    };
    let problems = check(&validator, &json!({"count": "secret-value"}));
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"/count") && paths.contains(&"/name"),
        "{problems:?}"
    );
    let shown = summary(&problems, false);
    assert!(shown.contains("(and 1 more)"), "{shown}");
    for problem in &problems {
        assert!(!problem.masked.contains("secret-value"), "{problem:?}");
    }
    assert!(problems.iter().any(|p| p.message.contains("secret-value")));
}

#[test]
fn self_referencing_and_hostile_schemas_do_not_hang_or_crash() {
    let recursive = json!({"name": "t", "inputSchema": {"$ref": "#"}});
    if let Schema::Checks(validator) = compile(&raw(&recursive)) {
        let _ = check(&validator, &json!({"a": 1}));
    }
    let nested = json!({"name": "t", "inputSchema": {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }});
    let Schema::Checks(validator) = compile(&raw(&nested)) else {
        panic!("compiles")
    };
    let mut deep = json!({});
    for _ in 0..100 {
        deep = json!({"next": deep});
    }
    assert!(check(&validator, &deep).is_empty());
    let catastrophic = json!({"name": "t", "inputSchema": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
    }});
    let Schema::Checks(validator) = compile(&raw(&catastrophic)) else {
        panic!("compiles")
    };
    let input = format!("{}!", "a".repeat(64));
    // Either refused by the pattern or stopped by the backtracking limit:
    // it returns.
    let _ = check(&validator, &json!({"s": input}));
}

#[test]
fn the_readme_example_reads_as_shown() {
    let catalog: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/catalog/github.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tool = catalog["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "add_issue_comment")
        .unwrap();
    let Schema::Checks(validator) = compile(&raw(tool)) else {
        panic!("compiles")
    };
    let problems = check(
        &validator,
        &json!({"owner": "o", "repo": "r", "issue_number": "7"}),
    );
    assert_eq!(
        serde_json::to_value(&problems).unwrap(),
        json!([
            {"path": "/body", "message": "\"body\" is a required property", "keyword": "required", "schemaPath": "/required"},
            {"path": "/issue_number", "message": "\"7\" is not of type \"number\"", "keyword": "type", "schemaPath": "/properties/issue_number/type"},
        ])
    );
    assert_eq!(
        summary(&problems, false),
        "/body: \"body\" is a required property (and 1 more)"
    );
}
