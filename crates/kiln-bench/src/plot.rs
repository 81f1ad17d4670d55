//! `kiln bench --plot DIR`: charts of a result document, kiln beside PyTorch and the
//! bandwidth floor, each written twice with one basename: `<name>.png` and `<name>.svg`.
//! `linear`: GB/s per shape against weight size. `<suite>` for the op-latency suites with a
//! floor (reductions, fp8): % of the floor per workload. Text is drawn with DejaVu Sans,
//! embedded in the binary (`assets/`), so no system fonts are needed.

use kiln::{Error, Result};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (1000, 560);
const KILN: RGBColor = RGBColor(214, 96, 30);
const TORCH: RGBColor = RGBColor(60, 110, 180);
/// DejaVu Sans (Bitstream Vera licence; see `assets/README.md`), the "sans-serif" of every
/// chart: plotters' ab_glyph text needs a registered font on both backends.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok =
        *DONE.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    ok.then_some(()).ok_or_else(|| Error::invalid("plot", "the embedded font does not parse"))
}

/// One series: a legend label, its colour and its points.
struct Series {
    label: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// A scatter chart with a horizontal reference line at `floor.0` (labelled `floor.1`).
struct Chart<'a> {
    title: &'a str,
    /// Axis description and whether the axis is logarithmic.
    x: (&'a str, bool),
    y: &'a str,
    series: Vec<Series>,
    floor: (f64, &'a str),
}

type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

impl Chart<'_> {
    /// Draws the chart on any backend (SVG and PNG share this).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let all = || self.series.iter().flat_map(|s| s.points.iter());
        let (x0, x1) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let y1 = all().fold(self.floor.0, |m, p| m.max(p.1)) * 1.1;
        root.fill(&WHITE)?;
        let mut b = ChartBuilder::on(root);
        b.caption(self.title, ("sans-serif", 22)).margin(16).x_label_area_size(44).y_label_area_size(64);
        if self.x.1 {
            self.body(b.build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), 0.0..y1)?, (x0, x1))?;
        } else {
            self.body(b.build_cartesian_2d(x0 - 1.0..x1 + 1.0, 0.0..y1)?, (x0, x1))?;
        }
        root.present()
    }

    /// Mesh, floor line, series and legend on a built coordinate system (linear or log x).
    fn body<'a, DB, X, Y>(
        &self,
        mut ctx: ChartContext<'a, DB, Cartesian2d<X, Y>>,
        (x0, x1): (f64, f64),
    ) -> DrawResult<DB>
    where
        DB: DrawingBackend + 'a,
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        ctx.configure_mesh().x_desc(self.x.0).y_desc(self.y).draw()?;
        let floor = self.floor.0;
        ctx.draw_series(LineSeries::new(
            [(x0, floor), (x1, floor)],
            ShapeStyle { color: BLACK.mix(0.6), filled: false, stroke_width: 1 },
        ))?
        .label(self.floor.1)
        .legend(|(a, b)| PathElement::new([(a, b), (a + 16, b)], BLACK));
        for s in self.series.iter().filter(|s| !s.points.is_empty()) {
            let c = s.color;
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))?
                .label(s.label)
                .legend(move |(a, b)| Circle::new((a + 8, b), 4, c.filled()));
        }
        ctx.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).draw()
    }

    /// Writes `<stem>.png` and `<stem>.svg` into `dir`; returns their paths.
    fn write(&self, dir: &Path, stem: &str) -> Result<[PathBuf; 2]> {
        fn err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> Error + '_ {
            move |e| Error::File { path: path.display().to_string(), msg: format!("drawing chart: {e:?}") }
        }
        register_font()?;
        let (png, svg) = (dir.join(format!("{stem}.png")), dir.join(format!("{stem}.svg")));
        self.draw(&BitMapBackend::new(&png, SIZE).into_drawing_area()).map_err(err(&png))?;
        self.draw(&SVGBackend::new(&svg, SIZE).into_drawing_area()).map_err(err(&svg))?;
        Ok([png, svg])
    }
}

fn rows<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// GB/s of kiln and PyTorch per linear shape, against weight MiB, under the copy bandwidth.
fn linear(suite: &Value) -> Chart<'static> {
    let shapes = rows(suite, "shapes");
    let pts = |key: &str| -> Vec<(f64, f64)> {
        shapes
            .iter()
            .filter_map(|r| Some((r["bytes"].as_f64()? / (1u64 << 20) as f64, r[key].as_f64()?)))
            .collect()
    };
    let copy = suite["copy_gbps"].as_f64().unwrap_or(0.0);
    Chart {
        title: "linear (GEMV decode shapes): achieved bandwidth",
        x: ("bytes moved per call (MiB, log)", true),
        y: "GB/s",
        series: vec![
            Series { label: "kiln", color: KILN, points: pts("gbps") },
            Series { label: "PyTorch", color: TORCH, points: pts("torch_gbps") },
        ],
        floor: (copy, "measured copy bandwidth"),
    }
}

/// % of the bandwidth floor (floor µs / µs) per workload, in suite order.
fn latency<'a>(title: &'a str, list: &[Value], kiln_key: &str) -> Chart<'a> {
    let pts = |key: &str| -> Vec<(f64, f64)> {
        list.iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i as f64, 100.0 * r["floor_us"].as_f64()? / r[key].as_f64()?)))
            .collect()
    };
    Chart {
        title,
        x: ("workload (suite order; names in the JSON)", false),
        y: "% of the bandwidth floor",
        series: vec![
            Series { label: "kiln", color: KILN, points: pts(kiln_key) },
            Series { label: "PyTorch", color: TORCH, points: pts("torch_us") },
        ],
        floor: (100.0, "floor"),
    }
}

/// Writes the charts `doc` has data for into `dir`, each as PNG and SVG; returns their paths.
pub fn write(doc: &Value, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io { path: dir.display().to_string(), source: e })?;
    let suites = &doc["suites"];
    let mut charts = vec![];
    if suites["linear"].is_object() {
        charts.push(("linear", linear(&suites["linear"])));
    }
    if suites["reductions"].is_object() {
        let list = rows(&suites["reductions"], "results");
        charts.push(("reductions", latency("reductions: share of the bandwidth floor", list, "kiln_us")));
    }
    if suites["fp8"].is_object() {
        let list = rows(&suites["fp8"], "op_latency");
        charts.push(("fp8", latency("scaled_mm: share of the bandwidth floor", list, "us")));
    }
    let mut out = vec![];
    for (stem, chart) in charts {
        out.extend(chart.write(dir, stem)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn charts_are_written_for_the_suites_present() {
        let doc = json!({ "suites": {
            "linear": { "copy_gbps": 4200.0, "shapes": [
                { "bytes": 8_388_608u64, "gbps": 3000.0, "torch_gbps": 1500.0 },
                { "bytes": 117_440_512u64, "gbps": 3900.0 },
            ]},
            "fp8": { "op_latency": [{ "us": 10.0, "floor_us": 8.0, "torch_us": 12.0 }] },
        }});
        let dir = std::env::temp_dir().join(format!("kiln-plot-{}", std::process::id()));
        let paths = write(&doc, &dir).unwrap();
        assert_eq!(
            paths.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect::<Vec<_>>(),
            ["linear.png", "linear.svg", "fp8.png", "fp8.svg"]
        );
        for png in [&paths[0], &paths[2]] {
            let bytes = std::fs::read(png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", png.display());
            // IHDR: width and height, big-endian, at bytes 16..24.
            let dim = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
            assert_eq!((dim(16), dim(20)), SIZE);
            // A blank 1000x560 canvas compresses to a few KB; axes, points and text add more.
            assert!((8_000..4_000_000).contains(&bytes.len()), "{}: {} bytes", png.display(), bytes.len());
        }
        let svg = std::fs::read_to_string(&paths[1]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("circle") && svg.contains("PyTorch"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
