//! The committed JSON Schema files must be exactly what the Rust types generate.
//! Run with `SWITCHYARD_BLESS=1` to rewrite them after changing a type.

use std::path::Path;

#[test]
fn committed_schemas_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("SWITCHYARD_BLESS").is_some();
    for (file, schema) in switchyard_schemas::json_schemas() {
        let generated = serde_json::to_string_pretty(&schema).expect("schema serializes") + "\n";
        let path = dir.join(file);
        if bless {
            std::fs::write(&path, &generated).expect("write schema");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is out of date: run `SWITCHYARD_BLESS=1 cargo test -p switchyard-schemas` and commit it",
            path.display()
        );
    }
}
