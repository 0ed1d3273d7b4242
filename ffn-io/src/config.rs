//! TOML config files with strict keys.
//!
//! # The pattern every `ffn` subcommand follows
//! Every CLI flag can also come from a config file; a flag given on the command line overrides the
//! file, and built-in defaults apply last.
//!
//! 1. Define one serde struct per subcommand whose fields mirror the flags, all `Option`, with
//!    `#[serde(deny_unknown_fields)]` (a typo is then an error, not a silently ignored key) and
//!    `Default`.
//! 2. Give the clap `Args` the same fields as `Option` **without** clap defaults, plus
//!    `--config FILE`.
//! 3. Load with [`load_toml_or_default`] and merge field by field: `args.x.or(file.x)`, then apply
//!    the default (`.unwrap_or(...)`) or report a missing required setting naming both the flag and
//!    the key.
//!
//! ```
//! #[derive(serde::Deserialize, Default, Debug)]
//! #[serde(deny_unknown_fields)]
//! struct StackConfig {
//!     source: Option<String>,
//!     output: Option<String>,
//! }
//! let file: StackConfig = ffn_io::config::parse_toml("output = 'raw.h5:raw'", "import.toml".as_ref()).unwrap();
//! let flag_output: Option<String> = None; // not given on the command line
//! assert_eq!(flag_output.or(file.output).as_deref(), Some("raw.h5:raw"));
//! let typo = ffn_io::config::parse_toml::<StackConfig>("ouput = 'x'", "import.toml".as_ref());
//! assert!(typo.unwrap_err().to_string().contains("unknown key `ouput`"));
//! ```

use crate::error::{IoError, one_line};
use serde::de::DeserializeOwned;
use std::path::Path;

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// Rewrites serde's "unknown field `x`, expected one of `a`, `b`" as "unknown key `x` (valid keys: a, b)".
fn describe(message: &str) -> String {
    let msg = one_line(message);
    if let Some(rest) = msg.strip_prefix("unknown field ") {
        let (key, valid) = match rest.split_once(", expected ") {
            Some((k, v)) => (
                k,
                v.trim_start_matches("one of ")
                    .replace("` or `", "`, `")
                    .replace('`', ""),
            ),
            None => (rest, String::from("none")),
        };
        return format!("unknown key {key} (valid keys: {valid})");
    }
    msg
}

/// Parses TOML `text` into `T`; `path` names the source in errors, which give the line and column,
/// and for an unknown key its name and the valid keys.
pub fn parse_toml<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, IoError> {
    toml::from_str(text).map_err(|e| {
        let place = e.span().map(|s| line_col(text, s.start));
        let what = describe(e.message());
        let reason = match place {
            Some((l, c)) => format!("line {l}, column {c}: {what}"),
            None => what,
        };
        IoError::Config {
            path: path.into(),
            reason,
        }
    })
}

/// Reads and parses a TOML config file.
pub fn load_toml<T: DeserializeOwned>(path: &Path) -> Result<T, IoError> {
    let text = std::fs::read_to_string(path).map_err(|e| IoError::os(path, e))?;
    parse_toml(&text, path)
}

/// [`load_toml`] when a path is given, `T::default()` otherwise.
pub fn load_toml_or_default<T: DeserializeOwned + Default>(
    path: Option<&Path>,
) -> Result<T, IoError> {
    path.map_or_else(|| Ok(T::default()), load_toml)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Sub {
        lr: Option<f64>,
    }

    #[derive(Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Conf {
        name: Option<String>,
        steps: Option<u64>,
        optim: Option<Sub>,
    }

    #[test]
    fn good_file_parses() {
        let c: Conf = parse_toml(
            "name = 'a'\nsteps = 3\n[optim]\nlr = 0.5\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            c,
            Conf {
                name: Some("a".into()),
                steps: Some(3),
                optim: Some(Sub { lr: Some(0.5) })
            }
        );
    }

    #[test]
    fn typo_names_key_line_and_valid_keys() {
        let e = parse_toml::<Conf>("name = 'a'\nstpes = 3\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "c.toml: line 2, column 1: unknown key `stpes` (valid keys: name, steps, optim)"
        );
        let e = parse_toml::<Conf>("[optim]\nrl = 1.0\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown key `rl` (valid keys: lr)"),
            "{e}"
        );
    }

    #[test]
    fn two_and_one_valid_keys_are_listed_alike() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Two {
            a: Option<u8>,
            b: Option<u8>,
        }
        let e = parse_toml::<Two>("c = 1", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("unknown key `c` (valid keys: a, b)"), "{e}");
    }

    #[test]
    fn wrong_type_and_syntax_and_missing_file() {
        let e = parse_toml::<Conf>("steps = 'many'\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml: line 1, column 9:") && !e.contains('\n'),
            "{e}"
        );
        let e = parse_toml::<Conf>("steps = \n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml: line 1") && !e.contains('\n'), "{e}");
        let e = load_toml::<Conf>(Path::new("/no/such.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/no/such.toml: file not found");
        assert_eq!(load_toml_or_default::<Conf>(None).unwrap(), Conf::default());
    }
}
