//! The reference Python clients of the interoperability tests: the interpreter comes from
//! `FFN_PYTHON` (a venv made by `scripts/python-interop-env.sh`); without it a test says it was
//! skipped, unless `FFN_REQUIRE_INTEROP=1` (CI), where its absence fails it.

use std::path::Path;
use std::process::Command;

/// The interpreter, or `None` (the test `test` is skipped) when there is none and CI does not
/// require it.
pub fn python(test: &str) -> Option<String> {
    match std::env::var("FFN_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var("FFN_REQUIRE_INTEROP").as_deref() == Ok("1") => {
            panic!("{test}: FFN_REQUIRE_INTEROP=1 but FFN_PYTHON is not set")
        }
        _ => {
            eprintln!(
                "{test}: SKIPPED (set FFN_PYTHON to the python of bash scripts/python-interop-env.sh)"
            );
            None
        }
    }
}

/// Runs `script` with `python`, `root` as its first argument; panics with its output when it
/// fails, else returns its standard output.
pub fn run_python(python: &str, script: &str, root: &Path) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(root)
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
