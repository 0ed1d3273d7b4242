//! `ffn import`: bring image stacks and label maps into HDF5 volumes (axes z,y,x).
//!
//! - `ffn import stack SOURCE --output FILE.h5:DATASET`: a folder (or `*` pattern) of 8-bit grayscale
//!   PNG slices, sorted by the number in their names, into a `uint8` volume.
//! - `ffn import labels INPUT --output FILE.h5:DATASET`: a label volume from an HDF5 (or `.h5.gz`)
//!   file, by default FlyEM-style: supervoxels in `stack` mapped to bodies through `transforms`.
//!
//! Every flag can also come from `--config FILE.toml` (same names, `-` written `_`); flags override
//! the file (see `ffn_io::config`).

use anyhow::{Context, Result};
use ffn_io::VolumeSpec;
use ffn_io::import::{Imported, LabelsImport, import_labels, import_stack};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Arguments of `ffn import`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// A folder or pattern of 2D 8-bit grayscale PNG or TIFF slices (every TIFF page one z), or one
    /// multi-page TIFF, into a uint8 volume.
    Stack(StackArgs),
    /// A label volume (any integer type; optionally supervoxels mapped to bodies) into a volume.
    Labels(LabelsArgs),
}

/// Arguments of `ffn import stack`.
#[derive(clap::Args, Debug)]
struct StackArgs {
    /// Folder of PNG / TIFF slices, a pattern such as 'maps/iso.*.png' (quote it), or one
    /// multi-page TIFF file.
    source: Option<String>,
    /// Output volume, FILE.h5:DATASET (other datasets of the file are kept).
    #[arg(long, short)]
    output: Option<String>,
    #[command(flatten)]
    region: Region,
    /// TOML file with the same settings (keys: source, output); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `--offset X,Y,Z --size X,Y,Z`: import only this box of the input (for example the training part
/// of a volume whose rest is held out for evaluation).
#[derive(clap::Args, Debug)]
struct Region {
    /// First voxel (x,y,z) of the box to import; goes with --size.
    #[arg(long)]
    offset: Option<String>,
    /// Size (x,y,z) of the box to import; goes with --offset.
    #[arg(long)]
    size: Option<String>,
}

impl Region {
    /// The box of `--offset/--size` (z,y,x), `None` without them.
    fn parse(&self) -> Result<Option<ffn_io::import::Region>> {
        ffn_io::xyz::parse_region(self.offset.as_deref(), self.size.as_deref())
    }
}

/// `ffn import stack` settings from a config file.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct StackConfig {
    source: Option<String>,
    output: Option<String>,
}

/// Arguments of `ffn import labels`.
#[derive(clap::Args, Debug)]
struct LabelsArgs {
    /// HDF5 file with the labels, plain or gzip-compressed (.h5.gz).
    input: Option<PathBuf>,
    /// Output volume, FILE.h5:DATASET; written as the smallest unsigned type that fits.
    #[arg(long, short)]
    output: Option<String>,
    /// Dataset of the input that holds the (supervoxel) labels [default: stack].
    #[arg(long)]
    stack_dataset: Option<String>,
    /// Dataset of the input with the (supervoxel, body) table [default: transforms].
    #[arg(long, conflicts_with = "no_transforms")]
    transforms: Option<String>,
    /// Copy the labels as they are, without a supervoxel -> body table.
    #[arg(long)]
    no_transforms: bool,
    #[command(flatten)]
    region: Region,
    /// TOML file with the same settings (keys: input, output, stack_dataset, transforms,
    /// no_transforms); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `ffn import labels` settings from a config file.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct LabelsConfig {
    input: Option<PathBuf>,
    output: Option<String>,
    stack_dataset: Option<String>,
    transforms: Option<String>,
    no_transforms: Option<bool>,
}

/// A required setting: the flag, else the config key, else an error naming both.
fn required<T>(
    flag: Option<T>,
    file: Option<T>,
    name: &str,
    key: &str,
    config: Option<&Path>,
) -> Result<T> {
    flag.or(file).with_context(|| match config {
        Some(c) => format!(
            "missing {name}: give it on the command line or as `{key}` in {}",
            c.display()
        ),
        None => {
            format!("missing {name}: give it on the command line or as `{key}` in a --config file")
        }
    })
}

/// ", box at x,y,z = ... of size ..." for a cropped import; empty for the whole volume.
fn region_note(v: &Imported) -> String {
    let ((o, s), full) = (v.region, v.full);
    if o == [0; 3] && s == full {
        return String::new();
    }
    format!(
        ", the box at x,y,z = {},{},{} of size {},{},{}",
        o[2], o[1], o[0], s[2], s[1], s[0]
    )
}

/// The required `--output FILE.h5:DATASET`, from the flag or the config file.
fn output_spec(
    flag: Option<String>,
    file: Option<String>,
    config: Option<&Path>,
) -> Result<VolumeSpec> {
    let text = required(flag, file, "--output FILE.h5:DATASET", "output", config)?;
    Ok(text.parse::<VolumeSpec>()?)
}

/// Runs `ffn import`.
pub fn run(args: Args) -> Result<()> {
    match args.what {
        What::Stack(a) => run_stack(a),
        What::Labels(a) => run_labels(a),
    }
}

fn run_stack(args: StackArgs) -> Result<()> {
    let cfg_path = args.config.as_deref();
    let file: StackConfig = ffn_io::config::load_toml_or_default(cfg_path)?;
    let source = required(
        args.source,
        file.source,
        "SOURCE (slice folder or pattern)",
        "source",
        cfg_path,
    )?;
    let output = output_spec(args.output, file.output, cfg_path)?;
    let done = import_stack(&source, &output, args.region.parse()?)?;
    let (s, slices) = (done.volume.shape, &done.slices);
    println!(
        "wrote {output}: uint8, shape {} x {} x {} (z,y,x) from {} slices in {} file(s) ({} .. {}){}",
        s[0],
        s[1],
        s[2],
        done.volume.full[0],
        slices.len(),
        slices
            .first()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        slices
            .last()
            .and_then(|p| p.file_name())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        region_note(&done.volume),
    );
    Ok(())
}

fn run_labels(args: LabelsArgs) -> Result<()> {
    let cfg_path = args.config.as_deref();
    let file: LabelsConfig = ffn_io::config::load_toml_or_default(cfg_path)?;
    let input = required(
        args.input,
        file.input,
        "INPUT (label file)",
        "input",
        cfg_path,
    )?;
    let output = output_spec(args.output, file.output, cfg_path)?;
    let stack = args
        .stack_dataset
        .or(file.stack_dataset)
        .unwrap_or_else(|| "stack".into());
    let no_transforms =
        args.no_transforms || (args.transforms.is_none() && file.no_transforms.unwrap_or(false));
    let transforms = if no_transforms {
        None
    } else {
        Some(
            args.transforms
                .or(file.transforms)
                .unwrap_or_else(|| "transforms".into()),
        )
    };
    let done = import_labels(&LabelsImport {
        input: input.clone(),
        stack_dataset: stack.clone(),
        transforms: transforms.clone(),
        output: output.clone(),
        region: args.region.parse()?,
    })?;
    let (s, objects, zeros) = (done.volume.shape, done.objects, done.zeros);
    let how = match &transforms {
        Some(t) => format!("'{stack}' mapped through '{t}'"),
        None => format!("'{stack}' as is"),
    };
    println!(
        "wrote {output}: {}, shape {} x {} x {} (z,y,x), {} distinct ids ({objects} non-zero, id 0 on {zeros} voxels) from {} {how}{}",
        done.dtype,
        s[0],
        s[1],
        s[2],
        objects + usize::from(zeros > 0),
        input.display(),
        region_note(&done.volume),
    );
    Ok(())
}
