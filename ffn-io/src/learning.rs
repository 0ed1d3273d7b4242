//! How well a training run's checkpoints segment a fixed held-out box, against
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

use crate::VolumeSpec;
use crate::checkpoint::{list_checkpoints, load_checkpoint};
use crate::heldout::{HeldOut, Scored, context_region};
use crate::plot;
use anyhow::{Context, Result, bail};
use ffn_core::inference::{AgglomerateOptions, InferenceOptions};
use ffn_core::network::ConvStack3d;

/// What [`evaluate_run`] evaluates and where it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct LearningOptions {
    /// The training run's output folder (its `checkpoints/` and `train_log.csv`).
    pub run: PathBuf,
    /// Image volume that holds the held-out box.
    pub image: VolumeSpec,
    /// Ground-truth labels, same shape as the image.
    pub labels: VolumeSpec,
    /// First voxel of the held-out box, `[z, y, x]`.
    pub offset: [usize; 3],
    /// Size of the held-out box, `[z, y, x]`.
    pub size: [usize; 3],
    /// A reference model run on the same box and context (e.g. Google's `model.ckpt-27465036`).
    pub reference: Option<PathBuf>,
    /// A reference segmentation of the whole volume (e.g. Google's published one), scored on the
    /// box.
    pub reference_segmentation: Option<VolumeSpec>,
    /// Inference runs on the box grown by this many voxels on every side (clamped to the volume
    /// and to `z >= heldout_z`), so that objects reaching into the box from outside are seeded.
    pub context: usize,
    /// The held-out part starts at this z: inference never reads the image below it.
    pub heldout_z: usize,
    /// Evaluate every N-th checkpoint (the newest always).
    pub every: usize,
    /// The flood-filling options of every segmentation (google/ffn's defaults by default; the
    /// seeds are PolicyPeaks).
    pub inference: InferenceOptions,
    /// Agglomerate every segmentation after its flood fill (`None`: no agglomeration).
    pub agglomerate: Option<AgglomerateOptions>,
    /// Output folder for `learning.csv`, `learning.md` and `learning_curve.png`.
    pub out: PathBuf,
}

/// What [`evaluate_run`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct LearningReport {
    /// The Markdown table (also in `learning.md`).
    pub table: String,
    /// `learning.csv`.
    pub csv: PathBuf,
}

/// One evaluated model: a checkpoint of the run, the reference model or the published
/// segmentation.
#[derive(Clone, Debug, PartialEq)]
pub struct LearningRow {
    /// "ffn-rs" or "reference".
    pub model: String,
    /// Training step of the checkpoint (0 for the references).
    pub step: u64,
    /// Training examples seen: step x batch size.
    pub examples: u64,
    /// Training CPU-hours recorded by the checkpoint (NaN when it records none).
    pub cpu_hours: f64,
    /// Wall-clock hours of training at that step, from the run's log (NaN when unknown).
    pub wall_hours: f64,
    /// Segments in the box.
    pub segments: usize,
    /// Fraction of the box left unsegmented.
    pub unsegmented: f64,
    /// Variation of information, split part (bits).
    pub voi_split: f64,
    /// Variation of information, merge part (bits).
    pub voi_merge: f64,
    /// Adapted Rand error.
    pub arand: f64,
    /// Wall-clock seconds of inference.
    pub infer_seconds: f64,
}

const HEADER: &str = "model,step,examples,cpu_hours,wall_hours,segments,unsegmented,voi_split,voi_merge,adapted_rand_error,infer_seconds";

impl LearningRow {
    /// The row as a line of `learning.csv`.
    pub fn csv(&self) -> String {
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

    /// Parses a line of `learning.csv`.
    pub fn parse(line: &str) -> Option<LearningRow> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 11 {
            return None;
        }
        let x = |i: usize| f[i].parse::<f64>().ok();
        Some(LearningRow {
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

/// Scores every `every`-th checkpoint of the run (and the newest), the reference model and the
/// reference segmentation on the held-out box, with rows cached in `out/learning.csv` (checkpoints
/// already scored are skipped); writes `learning.md` and `learning_curve.png`. `progress` sees each
/// new row.
pub fn evaluate_run(
    args: &LearningOptions,
    mut progress: impl FnMut(&LearningRow),
) -> Result<LearningReport> {
    if args.every == 0 {
        bail!("every (--every): expected at least 1, found 0");
    }
    args.inference
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let full = crate::dataset_shape(&args.image)?;
    let (offset, shape) = (args.offset, args.size);
    if (0..3).any(|a| offset[a] + shape[a] > full[a]) {
        bail!(
            "{}: the box {:?} + {:?} (z,y,x) does not fit in the volume {:?}",
            args.image,
            offset,
            shape,
            full
        );
    }
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
    check_cached_settings(&args.out, &settings_line(args), !rows.is_empty())?;
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
        let norm = crate::model::training_normalisation(path, &ck.training_config)?;
        let net = ConvStack3d::from_params(ck.model, ck.params)?;
        let mut row = segment_and_score(&held, net, norm, args)
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
        progress(&row);
        rows.insert((row.model.clone(), row.step), row);
        write_rows(&csv_path, &rows)?;
    }
    if let Some(reference) = &args.reference
        && !rows.keys().any(|(m, _)| m == "reference")
    {
        let m = crate::load_model(reference)
            .with_context(|| format!("loading the reference {}", reference.display()))?;
        let net = ConvStack3d::from_params(m.config, m.params)?;
        let mut row = segment_and_score(&held, net, m.normalisation, args)?;
        row.model = "reference".into();
        progress(&row);
        rows.insert((row.model.clone(), 0), row);
        write_rows(&csv_path, &rows)?;
    }
    if let Some(spec) = &args.reference_segmentation
        && !rows.keys().any(|(m, _)| m == "published")
    {
        let seg = crate::read_labels_region(spec, offset, shape)?;
        let scored = held.score(seg.iter().copied().collect())?;
        let row = LearningRow {
            model: "published".into(),
            ..row_of(&scored)
        };
        progress(&row);
        rows.insert((row.model.clone(), 0), row);
        write_rows(&csv_path, &rows)?;
    }
    let table = markdown(&rows, args);
    let md = args.out.join("learning.md");
    crate::atomic::write_atomic(&md, table.as_bytes())?;
    curve(&args.out.join("learning_curve.png"), &rows)?;
    Ok(LearningReport {
        table,
        csv: csv_path,
    })
}

/// The inference options that change a segmentation, as one line (of `learning.md` and of the
/// cache's `learning.settings`).
fn inference_settings(o: &InferenceOptions) -> String {
    format!(
        "PolicyPeaks seeds, init activation {}, pad value {}, move threshold {}, segment threshold {}, min segment size {}, min boundary distance {:?} (z,y,x), disco seed threshold {}",
        o.init_activation,
        o.pad_value,
        o.move_threshold,
        o.segment_threshold,
        o.min_segment_size,
        o.min_boundary_dist,
        o.disco_seed_threshold
    )
}

/// [`inference_settings`] and the agglomeration's, as one line.
fn settings_line(args: &LearningOptions) -> String {
    let mut line = inference_settings(&args.inference);
    if !args.inference.symmetries.is_identity() {
        line += &format!(", predictions averaged over {}", args.inference.symmetries);
    }
    if let Some(a) = &args.agglomerate {
        line += &format!(
            ", agglomeration (min contact {}, min coverage {}, reach {:?} (z,y,x))",
            a.min_contact, a.min_coverage, a.reach
        );
    }
    line
}

/// The rows cached in `out/learning.csv` were made with the settings recorded in
/// `out/learning.settings` (`now`, [`settings_line`]): refuses to mix them with rows of other
/// settings (`cached`: the cache has rows), and records the settings of a new cache.
fn check_cached_settings(out: &Path, now: &str, cached: bool) -> Result<()> {
    let path = out.join("learning.settings");
    match std::fs::read_to_string(&path) {
        Ok(before) if cached && before.trim() != now => bail!(
            "{}: its rows were made with other inference settings ({}), not {}: use another --out, or remove the folder's learning.csv",
            out.join("learning.csv").display(),
            before.trim(),
            now
        ),
        Ok(before) if before.trim() == now => Ok(()),
        _ => crate::atomic::write_atomic(&path, format!("{now}\n").as_bytes())
            .with_context(|| format!("writing {}", path.display())),
    }
}

/// Segments the held-out box with `net` and makes its row (model, step and hours to be filled in).
fn segment_and_score(
    held: &HeldOut,
    net: ConvStack3d,
    trained: Option<crate::TrainingNormalisation>,
    args: &LearningOptions,
) -> Result<LearningRow> {
    Ok(row_of(&held.segment(
        net,
        trained,
        &args.inference,
        args.agglomerate.as_ref(),
    )?))
}

/// A row of scores (model, step and hours to be filled in).
fn row_of(s: &Scored) -> LearningRow {
    LearningRow {
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

type Rows = BTreeMap<(String, u64), LearningRow>;

fn read_rows(path: &Path) -> Result<Rows> {
    let mut rows = Rows::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(rows);
    };
    for (i, line) in text.lines().enumerate().skip(1) {
        let row = LearningRow::parse(line).with_context(|| {
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
    Ok(crate::atomic::write_atomic(path, text.as_bytes())?)
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

/// `[z, y, x]` as `x,y,z`.
fn xyz(v: [usize; 3]) -> String {
    format!("{},{},{}", v[2], v[1], v[0])
}

fn markdown(rows: &Rows, args: &LearningOptions) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Held-out box {} (x,y,z offset) of size {} in {}; {}; truth 0 ignored, unsegmented = one segment.\n",
        xyz(args.offset),
        xyz(args.size),
        args.labels,
        settings_line(args)
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
    let ours: Vec<&LearningRow> = rows.values().filter(|r| r.model == "ffn-rs").collect();
    let references: Vec<(&LearningRow, [u8; 3])> =
        [("reference", [30, 90, 200]), ("published", [40, 160, 60])]
            .into_iter()
            .filter_map(|(m, c)| rows.values().find(|r| r.model == m).map(|r| (r, c)))
            .collect();
    let series = |x: fn(&LearningRow) -> f64, y: fn(&LearningRow) -> f64| -> Vec<plot::Series> {
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
    let arand = |r: &LearningRow| r.arand;
    let vi = |r: &LearningRow| r.voi_split + r.voi_merge;
    let examples = |r: &LearningRow| r.examples as f64;
    let cpu = |r: &LearningRow| r.cpu_hours;
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
        let r = LearningRow {
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
        let back = LearningRow::parse(&r.csv()).unwrap();
        assert_eq!(back.step, 1200);
        assert!(back.wall_hours.is_nan());
        assert_eq!(back.arand, 0.25);
        assert_eq!(LearningRow::parse("a,b"), None);
    }

    #[test]
    fn a_cache_refuses_rows_of_other_agglomeration_or_symmetries() {
        let dir = tempfile::tempdir().unwrap();
        let mut args = LearningOptions {
            run: dir.path().join("run"),
            image: VolumeSpec::new(dir.path().join("v.h5"), "image"),
            labels: VolumeSpec::new(dir.path().join("v.h5"), "labels"),
            offset: [0; 3],
            size: [8; 3],
            reference: None,
            reference_segmentation: None,
            context: 0,
            heldout_z: 0,
            every: 1,
            inference: InferenceOptions::default(),
            agglomerate: None,
            out: dir.path().to_path_buf(),
        };
        let plain = settings_line(&args);
        assert!(!plain.contains("agglomeration"), "{plain}");
        check_cached_settings(&args.out, &plain, false).unwrap();
        args.agglomerate = Some(AgglomerateOptions {
            min_contact: 50,
            ..Default::default()
        });
        let merged = settings_line(&args);
        assert!(
            merged.contains("agglomeration (min contact 50, min coverage 0.5"),
            "{merged}"
        );
        let e = check_cached_settings(&args.out, &merged, true).unwrap_err();
        assert!(e.to_string().contains("other inference settings"), "{e}");
        check_cached_settings(&args.out, &plain, true).unwrap();
        // Test-time symmetries change the segmentation too.
        args.agglomerate = None;
        args.inference.symmetries = ffn_core::inference::Symmetries::ALL;
        let averaged = settings_line(&args);
        assert!(
            averaged.ends_with(", predictions averaged over flip-z,flip-y,flip-x,swap-xy"),
            "{averaged}"
        );
        assert!(check_cached_settings(&args.out, &averaged, true).is_err());
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
