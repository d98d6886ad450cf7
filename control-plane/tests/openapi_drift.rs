//! The committed `schemas/openapi.json` must be exactly what the code generates.
//! Run with `SWITCHYARD_BLESS=1` to rewrite it after changing an endpoint or a payload type.

use std::path::Path;

use switchyard_control_plane::openapi_document;

#[test]
fn committed_openapi_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/openapi.json");
    let generated =
        serde_json::to_string_pretty(&openapi_document()).expect("document serializes") + "\n";
    if std::env::var_os("SWITCHYARD_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date: run `SWITCHYARD_BLESS=1 cargo test -p switchyard-control-plane` and commit it",
        path.display()
    );
}

#[test]
fn every_reference_resolves() {
    let document = openapi_document();
    let schemas = &document["components"]["schemas"];
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = &reference[..reference.find('"').expect("closing quote")];
        assert!(schemas.get(name).is_some(), "dangling $ref to {name}");
    }
    assert!(document["paths"]["/v1/tenants/{tenant}/route"]["put"]["requestBody"].is_object());
}

/// Every operation is tagged with a declared tag, and every request body has an example its own schema accepts.
#[test]
fn operations_are_tagged_and_examples_are_valid() {
    let document = openapi_document();
    let tags: Vec<&str> = document["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for (path, methods) in document["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            let label = format!("{method} {path}");
            let tag = operation["tags"][0].as_str().unwrap_or("");
            assert!(tags.contains(&tag), "{label}: tag {tag:?}");
            let Some(media) = operation["requestBody"]["content"].get("application/json") else {
                continue;
            };
            let example = media
                .get("example")
                .unwrap_or_else(|| panic!("{label}: no request example"));
            let mut schema = media["schema"].clone();
            schema["components"] = document["components"].clone();
            let validator = jsonschema::validator_for(&schema).expect("schema compiles");
            let errors: Vec<String> = validator
                .iter_errors(example)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{label}: example invalid: {errors:?}");
        }
    }
    let action =
        &document["paths"]["/v1/tenants/{tenant}/migrations/{id}/{action}"]["post"]["parameters"];
    let action = action
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "action")
        .expect("the action parameter");
    assert_eq!(
        action["schema"]["enum"],
        serde_json::json!(["backfill", "verify", "cutover", "finish", "abort"])
    );
}
