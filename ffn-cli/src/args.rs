//! The argument parsers every subcommand shares: `x,y,z` triples and boxes (from
//! [`ffn_io::xyz`]), number lists and named volume specs. Errors name the flag (or file and line)
//! given as `what`, the text and what was expected.

use anyhow::{Context, Result, bail};
use ffn_io::VolumeSpec;
pub use ffn_io::xyz::{parse_box, parse_triple, parse_xyz};

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

/// Parses `NAME:FILE:DATASET` or `NAME:STORE.zarr/ARRAY`, or a spec without a name, named after
/// the file's (store's) stem.
pub fn parse_named_spec(s: &str) -> Result<(String, VolumeSpec)> {
    let names_a_store = |rest: &str| {
        rest.parse::<VolumeSpec>()
            .is_ok_and(|v| v.format != ffn_io::VolumeFormat::Hdf5)
    };
    let (name, rest) = match s.split_once(':') {
        Some((name, rest))
            if !name.contains('/') && (rest.contains(':') || names_a_store(rest)) =>
        {
            (name.to_string(), rest)
        }
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

/// Parses `--conv` (`winograd`, `winograd1d`, `direct`, `bf16` or `winograd3d`) for clap.
pub(crate) fn parse_conv_algorithm(
    name: &str,
) -> Result<ffn_core::conv::winograd::ConvAlgorithm, String> {
    ffn_core::conv::winograd::ConvAlgorithm::from_name(name).ok_or_else(|| {
        format!(
            "expected `winograd`, `winograd1d`, `direct`, `bf16` or `winograd3d`, found `{name}`"
        )
    })
}

/// Parses `--symmetries` for clap.
pub(crate) fn parse_symmetries(text: &str) -> Result<ffn_core::inference::Symmetries, String> {
    ffn_core::inference::Symmetries::parse(text)
}

/// Parses `--simd` (`portable`, `avx2` or `avx512`) for clap.
pub(crate) fn parse_simd(name: &str) -> Result<ffn_core::conv::Simd, String> {
    ffn_core::conv::Simd::from_name(name)
        .ok_or_else(|| format!("expected `portable`, `avx2` or `avx512`, found `{name}`"))
}

/// The SIMD cap of this process: `--simd` when given, else `$FFN_SIMD` when set.
///
/// # Errors
/// A `FFN_SIMD` that names no level.
pub(crate) fn simd_limit(
    flag: Option<ffn_core::conv::Simd>,
    env: Option<String>,
) -> anyhow::Result<Option<ffn_core::conv::Simd>> {
    match (flag, env) {
        (Some(s), _) => Ok(Some(s)),
        (None, None) => Ok(None),
        (None, Some(name)) => parse_simd(&name)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("environment variable FFN_SIMD: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_named_specs_are_read_and_errors_name_the_flag() {
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
        let (n, s) = parse_named_spec("fib:d/v.zarr/raw").unwrap();
        assert_eq!(
            (n.as_str(), s.to_string().as_str()),
            ("fib", "d/v.zarr/raw")
        );
        assert_eq!(parse_named_spec("d/v.zarr/raw").unwrap().0, "v");
    }

    #[test]
    fn simd_cap_comes_from_the_flag_then_the_environment() {
        use ffn_core::conv::Simd;
        let env = |v: &str| Some(v.to_string());
        assert_eq!(simd_limit(None, None).unwrap(), None);
        assert_eq!(simd_limit(None, env("avx2")).unwrap(), Some(Simd::Avx2));
        let flag = Some(Simd::Portable);
        assert_eq!(simd_limit(flag, env("avx512")).unwrap(), flag);
        let e = simd_limit(None, env("sse4")).unwrap_err().to_string();
        assert!(e.contains("FFN_SIMD") && e.contains("`sse4`"), "{e}");
    }
}

/// The convolution algorithm of inference (`ffn infer`, `ffn infer-tiled`).
#[derive(clap::Args, Clone, Debug)]
pub struct InferenceConvFlag {
    /// Convolution algorithm of the 3x3x3 layers: `winograd3d` (the default: Winograd over all
    /// three axes, F(4x4,3x3) in y and x and F(4,3) along z, for layers of 32k channels where AVX2
    /// or AVX-512 runs it, the others direct; Google's FIB-25 segmentation within adapted Rand
    /// error 2.2e-6), `winograd` (F(4x4,3x3) in y and x: Google's FIB-25 segmentation voxel for
    /// voxel), `winograd1d` (F(4,3) along x), `direct` (every multiply-add), or `bf16` (opt-in: the
    /// convs with 32k channels from inputs and weights rounded to bfloat16, by AMX tile products
    /// where the CPU has them, else emulated; segmentations differ from float32's).
    #[arg(long, default_value = "winograd3d", value_parser = parse_conv_algorithm)]
    pub conv: ffn_core::conv::winograd::ConvAlgorithm,
}

/// The flood-fill settings that a model can record (`ffn set-inference`) and that `ffn infer` and
/// `ffn infer-tiled` take, each unset unless given.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ThresholdFlags {
    /// Probability needed to move the FOV, and at the seed to keep going (google/ffn's default
    /// 0.9).
    #[arg(long)]
    pub move_threshold: Option<f32>,
    /// Probability at which voxels join the segment (google/ffn's default 0.6).
    #[arg(long)]
    pub segment_threshold: Option<f32>,
    /// Smallest segment kept, voxels (google/ffn's default 1000).
    #[arg(long)]
    pub min_segment_size: Option<usize>,
    /// Test-time augmentation: average the predictions of the FOV under these symmetries, `all`
    /// (16 predictions per call), or a comma-separated list of `flip-z`, `flip-y`, `flip-x`,
    /// `swap-xy` (2 to the number of them), or `none` (one prediction, google/ffn's way).
    #[arg(long, value_parser = parse_symmetries)]
    pub symmetries: Option<ffn_core::inference::Symmetries>,
}

impl ThresholdFlags {
    /// The given thresholds as a set of inference settings (`chosen_on` unset).
    pub fn settings(&self) -> ffn_io::inference_defaults::InferenceDefaults {
        ffn_io::inference_defaults::InferenceDefaults {
            move_threshold: self.move_threshold,
            segment_threshold: self.segment_threshold,
            min_segment_size: self.min_segment_size,
            symmetries: self.symmetries,
            chosen_on: None,
        }
    }
}

/// FFN agglomeration after the flood fill ([`ffn_core::inference::agglomerate`]): off unless
/// `--agglomerate` is given.
#[derive(clap::Args, Clone, Debug)]
pub struct AgglomerateFlags {
    /// Merge touching segments that the network joins in both directions where they touch.
    #[arg(long)]
    pub agglomerate: bool,
    /// Agglomeration: smallest contact tested, in voxel faces.
    #[arg(long, default_value_t = 20, requires = "agglomerate")]
    pub agglomerate_min_contact: u64,
    /// Agglomeration: fraction of the other segment (in the box around the contact) that each
    /// of the two floods must cover.
    #[arg(long, default_value_t = 0.5, requires = "agglomerate")]
    pub agglomerate_coverage: f64,
    /// Agglomeration: how far (voxels) the FOV centre may move from the contact's middle.
    #[arg(long, default_value_t = 8, requires = "agglomerate")]
    pub agglomerate_reach: usize,
}

impl AgglomerateFlags {
    /// The options, or `None` without `--agglomerate`.
    pub fn options(&self) -> Option<ffn_core::inference::AgglomerateOptions> {
        self.agglomerate
            .then_some(ffn_core::inference::AgglomerateOptions {
                min_contact: self.agglomerate_min_contact,
                min_coverage: self.agglomerate_coverage,
                reach: [self.agglomerate_reach; 3],
            })
    }
}
