//! `ffn bench learn`: how well a training run's checkpoints segment a fixed held-out box, against
//! training CPU-hours and examples, next to a reference model (Google's) on the same box.
//!
//! Every checkpoint of the run (or every `--every`-th, always the newest) segments the box by flood
//! filling from PolicyPeaks seeds, with the normalisation its checkpoint records, and is scored
//! against the ground truth (truth 0 ignored, unsegmented = one segment). Rows are cached in
//! `OUT/learning.csv`, so running it again while training goes on evaluates only the new
//! checkpoints. Outputs: `learning.csv`, `learning.md` (a table) and `learning_curve.png`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ffn_core::network::ConvStack3d;
use ffn_io::VolumeSpec;
use ffn_io::checkpoint::{list_checkpoints, load_checkpoint};

use ffn_io::heldout::{HeldOut, Scored, context_region};
use ffn_io::plot;

/// Arguments of `ffn bench learn`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The training run's output folder (as given to `ffn train --out`).
    #[arg(long)]
    run: PathBuf,
    /// Image volume FILE:DATASET that holds the held-out box.
    #[arg(long)]
    image: VolumeSpec,
    /// Ground-truth labels FILE:DATASET, same shape as --image.
    #[arg(long)]
    labels: VolumeSpec,
    /// First voxel of the held-out box, x,y,z.
    #[arg(long, value_name = "X,Y,Z")]
    offset: String,
    /// Size of the held-out box, x,y,z.
    #[arg(long, value_name = "X,Y,Z")]
    size: String,
    /// A reference model run on the same box and context (e.g. Google's `model.ckpt-27465036`).
    #[arg(long)]
    reference: Option<PathBuf>,
    /// A reference segmentation of the whole volume FILE:DATASET (e.g. Google's published one),
    /// scored on the box.
    #[arg(long)]
    reference_segmentation: Option<VolumeSpec>,
    /// Inference runs on the box grown by this many voxels on every side (clamped to the volume
    /// and to z >= --heldout-z), so that objects reaching into the box from outside are seeded.
    #[arg(long, default_value_t = 24)]
    context: usize,
    /// The held-out part starts at this z: inference never reads the image below it.
    #[arg(long, default_value_t = 0)]
    heldout_z: usize,
    /// Evaluate every N-th checkpoint (the newest always).
    #[arg(long, default_value_t = 1)]
    every: usize,
    /// Smallest segment kept by inference (voxels).
    #[arg(long, default_value_t = 1000)]
    min_segment_size: usize,
    /// Output folder for learning.csv, learning.md and learning_curve.png.
    #[arg(long)]
    out: PathBuf,
}

/// One evaluated model.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    /// "ffn-rs" or "reference".
    model: String,
    step: u64,
    examples: u64,
    /// Training CPU-hours recorded by the checkpoint (NaN when it records none).
    cpu_hours: f64,
    /// Wall-clock hours of training at that step, from the run's log (NaN when unknown).
    wall_hours: f64,
    segments: usize,
    unsegmented: f64,
    voi_split: f64,
    voi_merge: f64,
    arand: f64,
    infer_seconds: f64,
}

const HEADER: &str = "model,step,examples,cpu_hours,wall_hours,segments,unsegmented,voi_split,voi_merge,adapted_rand_error,infer_seconds";

impl Row {
    fn csv(&self) -> String {
        format!(
            "{},{},{},{:.4},{:.4},{},{:.4},{:.4},{:.4},{:.4},{:.1}",
            self.model,
            self.step,
            self.examples,
            self.cpu_hours,
            self.wall_hours,
            self.segments,
            self.unsegmented,
            self.voi_split,
            self.voi_merge,
            self.arand,
            self.infer_seconds
        )
    }

    fn parse(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 11 {
            return None;
        }
        let x = |i: usize| f[i].parse::<f64>().ok();
        Some(Row {
            model: f[0].to_string(),
            step: f[1].parse().ok()?,
            examples: f[2].parse().ok()?,
            cpu_hours: x(3)?,
            wall_hours: x(4)?,
            segments: f[5].parse().ok()?,
            unsegmented: x(6)?,
            voi_split: x(7)?,
            voi_merge: x(8)?,
            arand: x(9)?,
            infer_seconds: x(10)?,
        })
    }
}

/// Runs `ffn bench learn`.
pub fn run(args: Args) -> Result<()> {
    if args.every == 0 {
        bail!("--every 0: expected at least 1");
    }
    let full = ffn_io::dataset_shape(&args.image)?;
    let (offset, shape) = super::infer::parse_box(
        Some(args.offset.as_str()),
        Some(args.size.as_str()),
        full,
        &args.image,
    )?;
    if offset[0] < args.heldout_z {
        bail!(
            "--offset: the box starts at z = {} but the held-out part at --heldout-z {}",
            offset[0],
            args.heldout_z
        );
    }
    let context = context_region(offset, shape, args.context, [args.heldout_z, 0, 0], full);
    let held = HeldOut::read(&args.image, &args.labels, (offset, shape), context)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let csv_path = args.out.join("learning.csv");
    let mut rows = read_rows(&csv_path)?;
    let log = wall_hours_by_step(&args.run.join("train_log.csv"));

    let ckpt_dir = args.run.join("checkpoints");
    let all = if ckpt_dir.is_dir() {
        list_checkpoints(&ckpt_dir)?
    } else {
        Vec::new()
    };
    if all.is_empty() {
        bail!(
            "{}: no checkpoints (ckpt-STEP.safetensors) to evaluate",
            ckpt_dir.display()
        );
    }
    let last = all.len() - 1;
    for (i, (step, path)) in all.iter().enumerate() {
        if (i % args.every != 0 && i != last) || rows.contains_key(&("ffn-rs".into(), *step)) {
            continue;
        }
        let ck = load_checkpoint(path)?;
        let batch = ck.training_config["config"]["batch_size"]
            .as_u64()
            .unwrap_or(0);
        let cpu = ck.training_config["cpu_seconds"].as_f64();
        let counted_from = ck.training_config["cpu_seconds_from_step"]
            .as_u64()
            .unwrap_or(0);
        let norm = ffn_io::model::training_normalisation(path, &ck.training_config)?;
        let net = ConvStack3d::from_params(ck.model, ck.params)?;
        let mut row = segment_and_score(&held, net, norm, args.min_segment_size)
            .with_context(|| format!("evaluating {}", path.display()))?;
        row.model = "ffn-rs".into();
        row.step = *step;
        row.examples = step * batch;
        // CPU time recorded from the run's first step only; otherwise unknown.
        row.cpu_hours = match cpu {
            Some(c) if counted_from == 0 => c / 3600.0,
            _ => f64::NAN,
        };
        row.wall_hours = log.range(..=step).next_back().map_or(f64::NAN, |(_, h)| *h);
        eprintln!("bench learn: {}", row.csv());
        rows.insert((row.model.clone(), row.step), row);
        write_rows(&csv_path, &rows)?;
    }
    if let Some(reference) = &args.reference
        && !rows.keys().any(|(m, _)| m == "reference")
    {
        let m = ffn_io::load_model(reference)
            .with_context(|| format!("loading the reference {}", reference.display()))?;
        let net = ConvStack3d::from_params(m.config, m.params)?;
        let mut row = segment_and_score(&held, net, m.normalisation, args.min_segment_size)?;
        row.model = "reference".into();
        eprintln!("bench learn: {}", row.csv());
        rows.insert((row.model.clone(), 0), row);
        write_rows(&csv_path, &rows)?;
    }
    if let Some(spec) = &args.reference_segmentation
        && !rows.keys().any(|(m, _)| m == "published")
    {
        let seg = ffn_io::read_labels_region(spec, offset, shape)?;
        let scored = held.score(seg.iter().copied().collect())?;
        let row = Row {
            model: "published".into(),
            ..row_of(&scored)
        };
        eprintln!("bench learn: {}", row.csv());
        rows.insert((row.model.clone(), 0), row);
        write_rows(&csv_path, &rows)?;
    }
    let table = markdown(&rows, &args);
    std::fs::write(args.out.join("learning.md"), &table)
        .with_context(|| format!("writing {}", args.out.join("learning.md").display()))?;
    curve(&args.out.join("learning_curve.png"), &rows)?;
    print!("{table}");
    println!(
        "wrote {}, learning.md and learning_curve.png",
        csv_path.display()
    );
    Ok(())
}

/// Segments the held-out box with `net` and makes its row (model, step and hours to be filled in).
fn segment_and_score(
    held: &HeldOut,
    net: ConvStack3d,
    trained: Option<ffn_io::TrainingNormalisation>,
    min_segment_size: usize,
) -> Result<Row> {
    Ok(row_of(&held.segment(net, trained, min_segment_size)?))
}

/// A row of scores (model, step and hours to be filled in).
fn row_of(s: &Scored) -> Row {
    Row {
        model: String::new(),
        step: 0,
        examples: 0,
        cpu_hours: f64::NAN,
        wall_hours: f64::NAN,
        segments: s.segments,
        unsegmented: s.unsegmented,
        voi_split: s.scores.voi_split,
        voi_merge: s.scores.voi_merge,
        arand: s.scores.adapted_rand_error,
        infer_seconds: s.seconds,
    }
}

type Rows = BTreeMap<(String, u64), Row>;

fn read_rows(path: &Path) -> Result<Rows> {
    let mut rows = Rows::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(rows);
    };
    for (i, line) in text.lines().enumerate().skip(1) {
        let row = Row::parse(line).with_context(|| {
            format!(
                "{}: line {}: expected the 11 columns {HEADER}, found '{line}' (delete the file to start over)",
                path.display(),
                i + 1
            )
        })?;
        rows.insert((row.model.clone(), row.step), row);
    }
    Ok(rows)
}

fn write_rows(path: &Path, rows: &Rows) -> Result<()> {
    let mut text = format!("{HEADER}\n");
    for r in rows.values() {
        text.push_str(&r.csv());
        text.push('\n');
    }
    let tmp = path.with_extension("csv.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Training wall-clock hours by step, from the run's `train_log.csv` (`step` and `elapsed_s`
/// columns, summed over resumed sessions; the time between a session's last row and its end is
/// not counted); empty when the log is missing or has no such columns.
fn wall_hours_by_step(log: &Path) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(log) else {
        return out;
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let (Some(si), Some(ei)) = (
        header.iter().position(|&h| h == "step"),
        header.iter().position(|&h| h == "elapsed_s"),
    ) else {
        return out;
    };
    // `elapsed_s` restarts with every resumed process: add up the sessions.
    let (mut before, mut last) = (0.0, 0.0);
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if let (Some(Ok(s)), Some(Ok(e))) = (
            f.get(si).map(|v| v.parse::<u64>()),
            f.get(ei).map(|v| v.parse::<f64>()),
        ) {
            if e < last {
                before += last;
            }
            last = e;
            out.insert(s, (before + e) / 3600.0);
        }
    }
    out
}

fn markdown(rows: &Rows, args: &Args) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Held-out box {} (x,y,z offset) of size {} in {}; min segment size {}; truth 0 ignored, unsegmented = one segment.\n",
        args.offset, args.size, args.labels, args.min_segment_size
    );
    t.push_str("| model | step | examples | CPU-hours | wall hours | segments | unsegmented | VI split | VI merge | adapted Rand error |\n");
    t.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let hours = |h: f64| {
        if h.is_finite() {
            format!("{h:.2}")
        } else {
            "-".into()
        }
    };
    for r in rows.values() {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {:.1}% | {:.3} | {:.3} | {:.3} |",
            r.model,
            if r.model == "reference" {
                "-".into()
            } else {
                r.step.to_string()
            },
            if r.model == "reference" {
                "-".into()
            } else {
                r.examples.to_string()
            },
            hours(r.cpu_hours),
            hours(r.wall_hours),
            r.segments,
            100.0 * r.unsegmented,
            r.voi_split,
            r.voi_merge,
            r.arand
        );
    }
    t
}

/// Adapted Rand error and VI (split + merge) against examples and CPU-hours; the reference as a
/// flat line.
fn curve(path: &Path, rows: &Rows) -> Result<()> {
    let ours: Vec<&Row> = rows.values().filter(|r| r.model == "ffn-rs").collect();
    let references: Vec<(&Row, [u8; 3])> =
        [("reference", [30, 90, 200]), ("published", [40, 160, 60])]
            .into_iter()
            .filter_map(|(m, c)| rows.values().find(|r| r.model == m).map(|r| (r, c)))
            .collect();
    let series = |x: fn(&Row) -> f64, y: fn(&Row) -> f64| -> Vec<plot::Series> {
        let pts: Vec<(f64, f64)> = ours.iter().map(|r| (x(r), y(r))).collect();
        let mut s = vec![plot::Series::new(pts.clone(), [200, 40, 40])];
        let xs: Vec<f64> = pts.iter().map(|p| p.0).filter(|v| v.is_finite()).collect();
        if let (Some(a), Some(b)) = (
            xs.iter().copied().reduce(f64::min),
            xs.iter().copied().reduce(f64::max),
        ) {
            for (g, color) in &references {
                s.push(plot::Series::new(vec![(a, y(g)), (b, y(g))], *color));
            }
        }
        s
    };
    let arand = |r: &Row| r.arand;
    let vi = |r: &Row| r.voi_split + r.voi_merge;
    let examples = |r: &Row| r.examples as f64;
    let cpu = |r: &Row| r.cpu_hours;
    let p = |title, series, y_range| plot::Panel {
        title,
        series,
        y_range,
    };
    plot::grid(
        path,
        &[
            p(
                "ARAND vs examples",
                series(examples, arand),
                Some((0.0, 1.0)),
            ),
            p("ARAND vs CPU-hours", series(cpu, arand), Some((0.0, 1.0))),
            p("VI vs examples", series(examples, vi), None),
            p("VI vs CPU-hours", series(cpu, vi), None),
        ],
        "red: ffn-rs checkpoints, blue: reference model, green: published segmentation",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_the_csv() {
        let r = Row {
            model: "ffn-rs".into(),
            step: 1200,
            examples: 4800,
            cpu_hours: 0.5,
            wall_hours: f64::NAN,
            segments: 12,
            unsegmented: 0.125,
            voi_split: 1.25,
            voi_merge: 0.5,
            arand: 0.25,
            infer_seconds: 12.5,
        };
        let back = Row::parse(&r.csv()).unwrap();
        assert_eq!(back.step, 1200);
        assert!(back.wall_hours.is_nan());
        assert_eq!(back.arand, 0.25);
        assert_eq!(Row::parse("a,b"), None);
    }

    #[test]
    fn wall_hours_come_from_the_log_columns() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("train_log.csv");
        std::fs::write(
            &log,
            "step,loss,elapsed_s\n200,1.0,360\n400,0.9,7200\n600,0.8,3600\n",
        )
        .unwrap();
        let h = wall_hours_by_step(&log);
        assert_eq!(h.get(&200), Some(&0.1));
        assert_eq!(h.get(&400), Some(&2.0));
        // A resumed session starts its clock again.
        assert_eq!(h.get(&600), Some(&3.0));
        assert!(wall_hours_by_step(&dir.path().join("none.csv")).is_empty());
    }
}
