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
