//! `scripts/check-structure` finds what it is there for, in small workspaces planted with one violation each: a
//! module cycle drawn through a crate root's re-export, one drawn through (nested) brace groups, one inside a
//! binary (its own crate root), a module that uses one listed below it in a documented module map, and a type
//! whose inherent impl blocks outgrow the limit across files; and it passes on this repository.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// A workspace of one crate (`crate_dir`) in a scratch directory, removed on drop.
struct Planted(PathBuf);

impl Planted {
    /// The workspace with `files` (path, text) written into it.
    fn new(label: &str, crate_dir: &str, files: &[(&str, &str)]) -> Planted {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-structure-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let planted = Planted(dir);
        planted
            .file(
                "Cargo.toml",
                &format!("[workspace]\nmembers = [\"{crate_dir}\"]\n"),
            )
            .file(
                &format!("{crate_dir}/Cargo.toml"),
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n",
            );
        for (path, text) in files {
            planted.file(path, text);
        }
        planted
    }

    fn file(&self, path: &str, text: &str) -> &Planted {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(&path, text).expect("write the file");
        self
    }

    /// The checker's verdict and what it printed.
    fn check(&self) -> (bool, String) {
        check(&self.0)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn check(root: &Path) -> (bool, String) {
    let output = Command::new(workspace().join("scripts/check-structure"))
        .arg("--root")
        .arg(root)
        .output()
        .expect("run scripts/check-structure");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn assert_finds(planted: &Planted, expected: &str) {
    let (passed, output) = planted.check();
    assert!(
        !passed,
        "passed, though it should find {expected:?}:\n{output}"
    );
    assert!(
        output.contains(expected),
        "does not say {expected:?}:\n{output}"
    );
}

#[test]
fn passes_on_this_repository() {
    let (passed, output) = check(&workspace());
    assert!(passed, "{output}");
}

#[test]
fn a_cycle_through_a_re_export_at_the_crate_root() {
    let planted = Planted::new(
        "reexport",
        "demo",
        &[
            ("demo/src/lib.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
            (
                "demo/src/a.rs",
                "pub struct Thing;\npub fn f() {\n    crate::b::g();\n}\n",
            ),
            ("demo/src/b.rs", "use crate::Thing;\npub fn g() {}\n"),
        ],
    );
    assert_finds(&planted, "demo: module cycle between a, b");
    // The same re-export, used by a module the re-exporting one does not use back: no cycle.
    planted.file("demo/src/a.rs", "pub struct Thing;\n");
    let (passed, output) = planted.check();
    assert!(passed, "{output}");
}

#[test]
fn a_cycle_through_nested_brace_groups() {
    let planted = Planted::new(
        "braces",
        "demo",
        &[
            ("demo/src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            (
                "demo/src/a.rs",
                "use crate::{c::C, b::{self, inner::{g}}};\npub fn f() {}\n",
            ),
            ("demo/src/b.rs", "pub mod inner;\n"),
            (
                "demo/src/b/inner.rs",
                "use crate::{a::{f as a_f}};\npub fn g() {}\n",
            ),
            ("demo/src/c.rs", "pub struct C;\n"),
        ],
    );
    assert_finds(&planted, "demo: module cycle between a, b");
}

#[test]
fn each_binary_is_its_own_crate_root() {
    // `crate::config` in the binary is its own module, not the library's.
    let planted = Planted::new(
        "binary",
        "demo",
        &[
            ("demo/src/lib.rs", "mod config;\n"),
            ("demo/src/config.rs", "pub struct Config;\n"),
            (
                "demo/src/bin/tool/main.rs",
                "mod config;\nmod output;\nfn main() {}\n",
            ),
            (
                "demo/src/bin/tool/config.rs",
                "use crate::output::Format;\npub struct Given;\n",
            ),
            (
                "demo/src/bin/tool/output.rs",
                "pub struct Format(crate::config::Given);\n",
            ),
        ],
    );
    assert_finds(
        &planted,
        "demo (bin tool): module cycle between config, output",
    );
}

/// A Markdown "Code map" table listing `modules` in order.
fn code_map(modules: &[&str]) -> String {
    let rows: String = modules
        .iter()
        .map(|m| format!("| `{m}` | its job |\n"))
        .collect();
    format!("## Code map\n\n| module | owns |\n|---|---|\n{rows}")
}

#[test]
fn a_module_above_one_it_uses_in_the_module_map() {
    let planted = Planted::new(
        "ranks",
        "control-plane",
        &[
            ("control-plane/src/lib.rs", "mod high;\nmod low;\n"),
            ("control-plane/src/low.rs", "pub struct Low;\n"),
            ("control-plane/src/high.rs", "use crate::low::Low;\n"),
            ("docs/control-plane.md", &code_map(&["low", "high"])),
        ],
    );
    let (passed, output) = planted.check();
    assert!(passed, "{output}");
    planted.file("docs/control-plane.md", &code_map(&["high", "low"]));
    assert_finds(
        &planted,
        "control-plane: high uses low, listed below it in docs/control-plane.md's \"Code map\"",
    );
}

#[test]
fn a_type_whose_impl_blocks_outgrow_the_limit_across_files() {
    // Two blocks of 452 lines each, in two files; trait impls do not count.
    let methods: String = (0..450)
        .map(|i| format!("    pub fn m{i}(&self) {{}}\n"))
        .collect();
    let planted = Planted::new(
        "type",
        "demo",
        &[
            ("demo/src/lib.rs", "mod big;\n"),
            (
                "demo/src/big.rs",
                &format!("mod more;\npub struct Big;\n\nimpl Big {{\n{methods}}}\n"),
            ),
            (
                "demo/src/big/more.rs",
                &format!(
                    "use super::Big;\n\nimpl Big {{\n{}}}\n\nimpl Clone for Big {{\n{methods}}}\n",
                    methods.replace("fn m", "fn n")
                ),
            ),
        ],
    );
    assert_finds(
        &planted,
        "demo: type big::Big has 904 lines of inherent impls, over the limit of 800",
    );
}
