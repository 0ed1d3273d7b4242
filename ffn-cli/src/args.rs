//! The argument parsers every subcommand shares: `x,y,z` triples, number lists and named volume
//! specs. Errors name the flag (or file and line) given as `what`, the text and what was expected.

use std::str::FromStr;

use anyhow::{Context, Result, bail};
use ffn_io::VolumeSpec;

/// Parses `x,y,z` (or one value for all three) non-negative integers into `[z, y, x]`.
pub fn parse_xyz(text: &str, what: &str) -> Result<[usize; 3]> {
    parse_triple(text, what)
}

/// Parses `x,y,z` (or one value for all three) of any number type into `[z, y, x]`.
pub fn parse_triple<T: FromStr + Copy>(text: &str, what: &str) -> Result<[T; 3]> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let num = |p: &str| {
        p.parse::<T>().ok().with_context(|| {
            format!(
                "{what} {text:?}: expected three numbers x,y,z (or one for all three), found {p:?}"
            )
        })
    };
    match parts.as_slice() {
        [v] => Ok([num(v)?; 3]),
        [x, y, z] => Ok([num(z)?, num(y)?, num(x)?]),
        _ => bail!(
            "{what} {text:?}: expected three numbers x,y,z (or one for all three), found {} values",
            parts.len()
        ),
    }
}

/// Parses a comma-separated list of numbers.
pub fn parse_f32_list(text: &str, what: &str) -> Result<Vec<f32>> {
    text.split(',')
        .map(|p| {
            p.trim()
                .parse::<f32>()
                .with_context(|| format!("{what} {text:?}: {p:?} is not a number"))
        })
        .collect()
}

/// Parses `NAME:FILE:DATASET`, or `FILE:DATASET` named after the file's stem.
pub fn parse_named_spec(s: &str) -> Result<(String, VolumeSpec)> {
    let (name, rest) = match s.split_once(':') {
        Some((name, rest)) if rest.contains(':') => (name.to_string(), rest),
        _ => {
            let spec: VolumeSpec = s.parse()?;
            let name = spec
                .path
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok((name, spec));
        }
    };
    if name.is_empty() {
        bail!("'{s}': empty volume name before the first ':' (expected NAME:FILE:DATASET)");
    }
    Ok((name, rest.parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples_are_read_as_xyz_and_errors_name_the_flag() {
        assert_eq!(parse_xyz("64, 32,16", "--chunk").unwrap(), [16, 32, 64]);
        assert_eq!(parse_xyz("25", "--fov").unwrap(), [25; 3]);
        let e = parse_xyz("64,32", "--chunk").unwrap_err().to_string();
        assert!(
            e.contains("--chunk \"64,32\": expected three numbers"),
            "{e}"
        );
        let e = parse_triple::<f64>("8,8,x", "--resolution")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--resolution") && e.contains("\"x\""), "{e}");
        assert!(parse_xyz("1,-2,3", "--size").is_err());
        assert_eq!(parse_f32_list("0.5, 1", "--t").unwrap(), [0.5, 1.0]);
        assert!(
            parse_f32_list("0.5,a", "--t")
                .unwrap_err()
                .to_string()
                .contains("\"a\"")
        );
        let (n, s) = parse_named_spec("a:x.h5:raw").unwrap();
        assert_eq!((n.as_str(), s.dataset.as_str()), ("a", "raw"));
        assert_eq!(parse_named_spec("dir/vol.h5:raw").unwrap().0, "vol");
        assert!(parse_named_spec(":x.h5:raw").is_err());
    }
}
