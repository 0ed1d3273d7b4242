//! Tiny PNG figures without a plotting library: training curves (line plots with axis ranges written
//! in a 3x5 pixel font). Slice overlays of segmentations are `ffn_core::segmentation::overlay`.

use std::path::Path;

use anyhow::Result;

/// An RGB raster.
pub struct Canvas {
    w: usize,
    h: usize,
    px: Vec<[u8; 3]>,
}

/// 3x5 glyphs, rows top to bottom, 3 bits per row (bit 2 = left column).
fn glyph(c: char) -> [u8; 5] {
    match c {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 2, 2],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '.' => [0, 0, 0, 0, 2],
        '-' => [0, 0, 7, 0, 0],
        'e' => [7, 5, 7, 4, 7],
        'l' => [4, 4, 4, 4, 7],
        'o' => [0, 7, 5, 5, 7],
        's' => [7, 4, 7, 1, 7],
        'F' => [7, 4, 6, 4, 4],
        't' => [4, 7, 4, 4, 3],
        'p' => [7, 5, 7, 4, 4],
        'a' => [7, 1, 7, 5, 7],
        'c' => [0, 7, 4, 4, 7],
        'u' => [0, 5, 5, 5, 7],
        'r' => [0, 7, 4, 4, 4],
        'y' => [5, 5, 7, 1, 7],
        'A' => [2, 5, 7, 5, 5],
        'B' => [6, 5, 6, 5, 6],
        'C' => [7, 4, 4, 4, 7],
        'D' => [6, 5, 5, 5, 6],
        'E' => [7, 4, 6, 4, 7],
        'G' => [7, 4, 5, 5, 7],
        'H' => [5, 5, 7, 5, 5],
        'I' => [7, 2, 2, 2, 7],
        'J' => [1, 1, 1, 5, 7],
        'K' => [5, 5, 6, 5, 5],
        'L' => [4, 4, 4, 4, 7],
        'M' => [5, 7, 7, 5, 5],
        'N' => [6, 5, 5, 5, 5],
        'O' => [7, 5, 5, 5, 7],
        'P' => [7, 5, 7, 4, 4],
        'Q' => [7, 5, 5, 7, 1],
        'R' => [6, 5, 6, 5, 5],
        'S' => [7, 4, 7, 1, 7],
        'T' => [7, 2, 2, 2, 2],
        'U' => [5, 5, 5, 5, 7],
        'V' => [5, 5, 5, 5, 2],
        'W' => [5, 5, 7, 7, 5],
        'X' => [5, 5, 2, 5, 5],
        'Y' => [5, 5, 2, 2, 2],
        'Z' => [7, 1, 2, 4, 7],
        ':' => [0, 2, 0, 2, 0],
        ',' => [0, 0, 0, 2, 4],
        '(' => [1, 2, 2, 2, 1],
        ')' => [4, 2, 2, 2, 4],
        '/' => [1, 1, 2, 4, 4],
        '%' => [5, 1, 2, 4, 5],
        '+' => [0, 2, 7, 2, 0],
        '=' => [0, 7, 0, 7, 0],
        '_' => [0, 0, 0, 0, 7],
        '\'' => [2, 2, 0, 0, 0],
        // Other lower-case letters as their capitals.
        c if c.is_ascii_lowercase() => glyph(c.to_ascii_uppercase()),
        _ => [0; 5],
    }
}

impl Canvas {
    /// A canvas filled with one colour.
    pub fn new(w: usize, h: usize, fill: [u8; 3]) -> Self {
        Self {
            w,
            h,
            px: vec![fill; w * h],
        }
    }

    /// Sets one pixel (ignored outside).
    pub fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            self.px[y as usize * self.w + x as usize] = c;
        }
    }

    /// A line by DDA, `thick` pixels wide.
    pub fn line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, c: [u8; 3], thick: i64) {
        let n = ((x1 - x0).abs().max((y1 - y0).abs()).ceil() as usize).max(1);
        for i in 0..=n {
            let t = i as f64 / n as f64;
            let (x, y) = (x0 + t * (x1 - x0), y0 + t * (y1 - y0));
            for dx in 0..thick {
                for dy in 0..thick {
                    self.set(x.round() as i64 + dx, y.round() as i64 + dy, c);
                }
            }
        }
    }

    /// Text in the 3x5 font scaled by `scale`, top-left at (x, y).
    pub fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3], scale: i64) {
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..3 {
                    if bits >> (2 - col) & 1 == 1 {
                        for a in 0..scale {
                            for b in 0..scale {
                                self.set(
                                    x + (k as i64 * 4 + col) * scale + a,
                                    y + row as i64 * scale + b,
                                    c,
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Copies another canvas in at (x, y).
    pub fn blit(&mut self, other: &Canvas, x: usize, y: usize) {
        for j in 0..other.h {
            for i in 0..other.w {
                self.set((x + i) as i64, (y + j) as i64, other.px[j * other.w + i]);
            }
        }
    }

    /// Writes an RGB PNG.
    pub fn save(&self, path: &Path) -> Result<()> {
        let data: Vec<u8> = self.px.iter().flatten().copied().collect();
        Ok(crate::write_rgb_png(path, self.w, self.h, &data)?)
    }
}

/// Short number text: 3 significant digits.
fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{v:.0}")
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.1e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A line of (x, y) points in one colour.
#[derive(Clone, Debug)]
pub struct Series {
    points: Vec<(f64, f64)>,
    color: [u8; 3],
}

impl Series {
    /// The points (non-finite ones are skipped when drawn) and their colour.
    pub fn new(points: Vec<(f64, f64)>, color: [u8; 3]) -> Self {
        Self { points, color }
    }
}

/// One panel: lines of (x, y) points inside a frame, with min/max labels; the axes span the
/// finite points of all the lines.
fn panel(title: &str, series: &[Series], y_range: Option<(f64, f64)>) -> Canvas {
    let (w, h) = (640usize, 260usize);
    let (left, right, top, bottom) = (70.0, 20.0, 30.0, 30.0);
    let mut c = Canvas::new(w, h, [255, 255, 255]);
    let (pw, ph) = (w as f64 - left - right, h as f64 - top - bottom);
    let frame = [90, 90, 90];
    c.line(left, top, left + pw, top, frame, 1);
    c.line(left, top + ph, left + pw, top + ph, frame, 1);
    c.line(left, top, left, top + ph, frame, 1);
    c.line(left + pw, top, left + pw, top + ph, frame, 1);
    c.text(left as i64, 8, title, [0, 0, 0], 3);
    let lines: Vec<Series> = series
        .iter()
        .map(|s| {
            let points = s
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect();
            Series::new(points, s.color)
        })
        .collect();
    let finite: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|l| l.points.iter().copied())
        .collect();
    if finite.is_empty() {
        return c;
    }
    let (x0, x1) = finite
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.0), a.1.max(p.0)));
    let (y0, y1) = y_range.unwrap_or_else(|| {
        finite
            .iter()
            .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.1), a.1.max(p.1)))
    });
    let (xs, ys) = ((x1 - x0).max(1e-12), (y1 - y0).max(1e-12));
    let grid = [225, 225, 225];
    for k in 1..4 {
        let y = top + ph * k as f64 / 4.0;
        c.line(left + 1.0, y, left + pw - 1.0, y, grid, 1);
    }
    let to_px = |p: (f64, f64)| (left + (p.0 - x0) / xs * pw, top + ph - (p.1 - y0) / ys * ph);
    for line in &lines {
        for pair in line.points.windows(2) {
            let (a, b) = (to_px(pair[0]), to_px(pair[1]));
            c.line(a.0, a.1, b.0, b.1, line.color, 2);
        }
        if let [p] = line.points.as_slice() {
            let a = to_px(*p);
            c.line(a.0 - 2.0, a.1, a.0 + 2.0, a.1, line.color, 3);
        }
    }
    let label = [60, 60, 60];
    c.text(4, top as i64, &fmt_num(y1), label, 2);
    c.text(4, (top + ph) as i64 - 10, &fmt_num(y0), label, 2);
    c.text(left as i64, (top + ph) as i64 + 8, &fmt_num(x0), label, 2);
    let xt = fmt_num(x1);
    c.text(
        (left + pw) as i64 - 8 * xt.len() as i64,
        (top + ph) as i64 + 8,
        &xt,
        label,
        2,
    );
    c
}

/// Writes the training curve: loss (top) and F1 (bottom, 0..1) against the step.
pub fn training_curve(path: &Path, loss: &[(f64, f64)], f1: &[(f64, f64)]) -> Result<()> {
    let a = panel("loss", &[Series::new(loss.to_vec(), [200, 40, 40])], None);
    let b = panel(
        "F1",
        &[Series::new(f1.to_vec(), [30, 90, 200])],
        Some((0.0, 1.0)),
    );
    let mut c = Canvas::new(a.w, a.h + b.h, [255, 255, 255]);
    c.blit(&a, 0, 0);
    c.blit(&b, 0, a.h);
    c.text(
        a.w as i64 - 90,
        (a.h + b.h) as i64 - 14,
        "step",
        [0, 0, 0],
        2,
    );
    c.save(path)
}

/// One panel of [`grid`].
pub struct Panel<'a> {
    /// Title drawn above the frame.
    pub title: &'a str,
    /// The lines.
    pub series: Vec<Series>,
    /// Fixed y range, or `None` to fit the points.
    pub y_range: Option<(f64, f64)>,
}

/// Writes panels in a grid of two columns, with a caption below.
pub fn grid(path: &Path, panels: &[Panel], caption: &str) -> Result<()> {
    let drawn: Vec<Canvas> = panels
        .iter()
        .map(|p| panel(p.title, &p.series, p.y_range))
        .collect();
    let (pw, ph) = drawn.first().map_or((640, 260), |p| (p.w, p.h));
    let rows = drawn.len().div_ceil(2);
    let mut c = Canvas::new(2 * pw, rows * ph + 24, [255, 255, 255]);
    for (i, p) in drawn.iter().enumerate() {
        c.blit(p, (i % 2) * pw, (i / 2) * ph);
    }
    c.text(10, (rows * ph) as i64 + 6, caption, [0, 0, 0], 2);
    c.save(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pngs_are_written_with_the_expected_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("curve.png");
        training_curve(
            &p,
            &[(0.0, 0.7), (10.0, 0.5), (20.0, 0.3)],
            &[(0.0, 0.1), (20.0, 0.8)],
        )
        .unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        // IHDR width and height, big-endian at bytes 16..24.
        assert_eq!(
            u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]),
            640
        );
        assert_eq!(
            u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]),
            520
        );
    }
}
