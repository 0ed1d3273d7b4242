//! `x,y,z` triples and boxes as users write them (flags, seed files), read into ffn-rs's
//! `[z, y, x]` order. Errors name the flag (or file and line) given as `what`, the text and what
//! was expected.

use std::str::FromStr;

use anyhow::{Context, Result, bail};

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

/// [`parse_xyz`] of the value of flag `--flag`, with one short message for every error
/// (`ffn infer-tiled`'s sizes).
pub fn parse_sizes(flag: &str, text: &str) -> Result<[usize; 3]> {
    parse_xyz(text, flag).map_err(|_| {
        anyhow::anyhow!("--{flag} {text:?}: expected one number or three numbers x,y,z")
    })
}

/// The box `(offset, size)` (z,y,x) of `--offset X,Y,Z --size X,Y,Z` inside a volume of shape
/// `full`; the whole volume without either flag. One flag without the other, an empty box or a
/// box that does not fit is an error naming the flags and the volume.
pub fn parse_box(
    offset: Option<&str>,
    size: Option<&str>,
    full: [usize; 3],
    volume: &dyn std::fmt::Display,
) -> Result<([usize; 3], [usize; 3])> {
    match parse_region(offset, size)? {
        Some((o, s)) => {
            check_box(o, s, full, volume)?;
            Ok((o, s))
        }
        None => Ok(([0; 3], full)),
    }
}

/// The box `(offset, size)` (z,y,x) of `--offset X,Y,Z --size X,Y,Z`, `None` without either flag;
/// one flag without the other is an error naming both.
pub fn parse_region(
    offset: Option<&str>,
    size: Option<&str>,
) -> Result<Option<([usize; 3], [usize; 3])>> {
    match (offset, size) {
        (Some(o), Some(s)) => Ok(Some((parse_xyz(o, "--offset")?, parse_xyz(s, "--size")?))),
        (None, None) => Ok(None),
        _ => bail!("--offset and --size go together: give both or neither"),
    }
}

/// Checks that the non-empty box `offset + size` (z,y,x) of `--offset/--size` fits in a volume of
/// shape `full`; the error names the flags and the volume.
pub fn check_box(
    offset: [usize; 3],
    size: [usize; 3],
    full: [usize; 3],
    volume: &dyn std::fmt::Display,
) -> Result<()> {
    if (0..3).any(|a| {
        offset[a]
            .checked_add(size[a])
            .is_none_or(|end| end > full[a])
            || size[a] == 0
    }) {
        bail!(
            "--offset/--size: the box {offset:?} + {size:?} (z,y,x) does not fit in {volume} of shape {full:?} (z,y,x)"
        );
    }
    Ok(())
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
    }

    #[test]
    fn sizes_take_one_number_or_three() {
        assert_eq!(parse_sizes("tile-size", "64").unwrap(), [64; 3]);
        assert_eq!(parse_sizes("tile-size", "8, 16,32").unwrap(), [32, 16, 8]);
        let e = parse_sizes("tile-size", "8,16").unwrap_err().to_string();
        assert_eq!(
            e,
            "--tile-size \"8,16\": expected one number or three numbers x,y,z"
        );
        assert!(parse_sizes("fov", "a").is_err());
        assert!(parse_sizes("fov", "1,2,3,4").is_err());
    }

    #[test]
    fn boxes_must_fit_and_come_with_both_flags() {
        let full = [10, 20, 30];
        assert_eq!(
            parse_box(None, None, full, &"v.h5:raw").unwrap(),
            ([0; 3], full)
        );
        let b = parse_box(Some("1,2,3"), Some("4,5,6"), full, &"v.h5:raw").unwrap();
        assert_eq!(b, ([3, 2, 1], [6, 5, 4]));
        let e = parse_box(Some("0,0,0"), Some("31,1,1"), full, &"v.h5:raw")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--offset/--size:") && e.contains("v.h5:raw"),
            "{e}"
        );
        let e = parse_box(Some("0,0,0"), None, full, &"v").unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
    }

    /// Found by the `xyz_specs` fuzz target: `offset + size` overflowed (a panic in debug builds).
    #[test]
    fn fuzz_box_whose_end_overflows_is_refused() {
        let e = parse_box(
            Some("1,18446744073709551615,1"),
            Some("1,1,1"),
            [100, usize::MAX, 7],
            &"v.h5:raw",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not fit in v.h5:raw"), "{e}");
    }
}
