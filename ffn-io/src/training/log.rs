//! The metrics log of a training run (`train_log.csv` or `train_log.jsonl`) and its rows.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::options::LogFormat;

/// One metrics row: the means over the steps since the previous row.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRow {
    /// Steps done.
    pub step: u64,
    /// Mean loss over the window.
    pub loss: f64,
    /// Precision of the examples finished in the window.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// F1.
    pub f1: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// Examples finished in the window.
    pub examples: u64,
    /// FOV evaluations (batch x steps x ranks) per second in the window.
    pub examples_per_s: f64,
    /// Learning rate at the window's last step.
    pub lr: f64,
    /// Seconds since this process started training.
    pub elapsed_s: f64,
}

/// The header row of `train_log.csv`.
pub const CSV_HEADER: &str =
    "step,loss,precision,recall,f1,accuracy,examples,examples_per_s,lr,elapsed_s";

impl LogRow {
    /// The row as a line of `train_log.csv`.
    pub fn csv(&self) -> String {
        format!(
            "{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.3},{:.6e},{:.1}",
            self.step,
            self.loss,
            self.precision,
            self.recall,
            self.f1,
            self.accuracy,
            self.examples,
            self.examples_per_s,
            self.lr,
            self.elapsed_s
        )
    }

    /// The row as a JSON object (a line of `train_log.jsonl`).
    pub fn json(&self) -> Value {
        json!({
            "step": self.step, "loss": self.loss, "precision": self.precision, "recall": self.recall,
            "f1": self.f1, "accuracy": self.accuracy, "examples": self.examples,
            "examples_per_s": self.examples_per_s, "lr": self.lr, "elapsed_s": self.elapsed_s,
        })
    }

    /// Parses a line of `train_log.csv` (`None` for the header or a malformed line).
    pub fn parse_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 10 {
            return None;
        }
        Some(Self {
            step: f[0].parse().ok()?,
            loss: f[1].parse().ok()?,
            precision: f[2].parse().ok()?,
            recall: f[3].parse().ok()?,
            f1: f[4].parse().ok()?,
            accuracy: f[5].parse().ok()?,
            examples: f[6].parse().ok()?,
            examples_per_s: f[7].parse().ok()?,
            lr: f[8].parse().ok()?,
            elapsed_s: f[9].parse().ok()?,
        })
    }

    /// Parses a line of `train_log.jsonl`.
    pub fn parse_json(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let g = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Self {
            step: v.get("step")?.as_u64()?,
            loss: g("loss")?,
            precision: g("precision")?,
            recall: g("recall")?,
            f1: g("f1")?,
            accuracy: g("accuracy")?,
            examples: v.get("examples")?.as_u64()?,
            examples_per_s: g("examples_per_s")?,
            lr: g("lr")?,
            elapsed_s: g("elapsed_s")?,
        })
    }
}

/// The log file of a run.
pub(crate) struct Log {
    pub(crate) path: PathBuf,
    format: LogFormat,
}

impl Log {
    /// A log that is never written (ranks other than 0).
    pub(crate) fn none(format: LogFormat) -> Self {
        Self {
            path: PathBuf::new(),
            format,
        }
    }

    /// Opens the log in `out`; keeps the rows up to `keep_until` (resume) or starts a new file.
    pub(crate) fn open(
        out: &Path,
        format: LogFormat,
        keep_until: Option<u64>,
    ) -> Result<(Self, Vec<LogRow>)> {
        let path = out.join(match format {
            LogFormat::Csv => "train_log.csv",
            LogFormat::Jsonl => "train_log.jsonl",
        });
        let mut rows = Vec::new();
        if let Some(step) = keep_until
            && path.exists()
        {
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            for line in text.lines().filter(|l| !l.is_empty() && *l != CSV_HEADER) {
                let row = match format {
                    LogFormat::Csv => LogRow::parse_csv(line),
                    LogFormat::Jsonl => LogRow::parse_json(line),
                };
                if let Some(r) = row
                    && r.step <= step
                {
                    rows.push(r);
                }
            }
        }
        let log = Self { path, format };
        log.rewrite(&rows)?;
        Ok((log, rows))
    }

    fn line(&self, r: &LogRow) -> String {
        match self.format {
            LogFormat::Csv => r.csv(),
            LogFormat::Jsonl => r.json().to_string(),
        }
    }

    fn rewrite(&self, rows: &[LogRow]) -> Result<()> {
        let mut text = String::new();
        if self.format == LogFormat::Csv {
            text.push_str(CSV_HEADER);
            text.push('\n');
        }
        for r in rows {
            text.push_str(&self.line(r));
            text.push('\n');
        }
        Ok(crate::atomic::write_atomic(&self.path, text.as_bytes())?)
    }

    /// Appends one row.
    pub(crate) fn append(&self, r: &LogRow) -> Result<()> {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        writeln!(f, "{}", self.line(r)).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Draws loss and F1 of `rows` over steps into the PNG `path`.
pub fn write_training_curve(path: &Path, rows: &[LogRow]) -> Result<()> {
    let loss: Vec<(f64, f64)> = rows.iter().map(|r| (r.step as f64, r.loss)).collect();
    let f1: Vec<(f64, f64)> = rows.iter().map(|r| (r.step as f64, r.f1)).collect();
    crate::plot::training_curve(path, &loss, &f1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_rows_round_trip() {
        let r = LogRow {
            step: 50,
            loss: 0.5,
            precision: 0.25,
            recall: 0.75,
            f1: 0.375,
            accuracy: 0.875,
            examples: 7,
            examples_per_s: 12.5,
            lr: 0.001,
            elapsed_s: 3.5,
        };
        assert_eq!(LogRow::parse_csv(&r.csv()), Some(r.clone()));
        assert_eq!(LogRow::parse_json(&r.json().to_string()), Some(r));
        assert_eq!(LogRow::parse_csv(CSV_HEADER), None);
    }
}
