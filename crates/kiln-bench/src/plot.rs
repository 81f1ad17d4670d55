//! `kiln bench --plot DIR`: SVG charts of a result document, kiln beside PyTorch and the
//! bandwidth floor. `linear.svg`: GB/s per shape against weight size. `<suite>.svg` for the
//! op-latency suites with a floor (reductions, fp8): % of the floor per workload.

use kiln::{Error, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (1000, 560);
const KILN: RGBColor = RGBColor(214, 96, 30);
const TORCH: RGBColor = RGBColor(60, 110, 180);

fn draw_err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::File { path: path.display().to_string(), msg: format!("drawing chart: {e:?}") }
}

/// One series: a legend label, its colour and its points.
struct Series {
    label: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// A scatter-and-line chart with a dashed horizontal reference line at `floor`.
fn chart(
    path: &Path,
    title: &str,
    x: (&str, bool),
    y: &str,
    series: &[Series],
    floor: (f64, &str),
) -> Result<()> {
    let err = draw_err(path);
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all().fold(floor.0, |m, p| m.max(p.1)) * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 22)).margin(16).x_label_area_size(44).y_label_area_size(64);
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh().x_desc(x.0).y_desc(y).draw().map_err(&err)?;
            ctx.draw_series(LineSeries::new(
                [(x0, floor.0), (x1, floor.0)],
                ShapeStyle { color: BLACK.mix(0.6), filled: false, stroke_width: 1 },
            ))
            .map_err(&err)?
            .label(floor.1)
            .legend(|(a, b)| PathElement::new([(a, b), (a + 16, b)], BLACK));
            for s in series.iter().filter(|s| !s.points.is_empty()) {
                let c = s.color;
                ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(&err)?
                    .label(s.label)
                    .legend(move |(a, b)| Circle::new((a + 8, b), 4, c.filled()));
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()
                .map_err(&err)?;
        }};
    }
    if x.1 {
        body!(b.build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), 0.0..y1).map_err(&err)?);
    } else {
        body!(b.build_cartesian_2d(x0 - 1.0..x1 + 1.0, 0.0..y1).map_err(&err)?);
    }
    root.present().map_err(&err)
}

fn rows<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// GB/s of kiln and PyTorch per linear shape, against weight MiB, under the copy bandwidth.
fn linear(suite: &Value, path: &Path) -> Result<()> {
    let shapes = rows(suite, "shapes");
    let pts = |key: &str| -> Vec<(f64, f64)> {
        shapes
            .iter()
            .filter_map(|r| Some((r["bytes"].as_f64()? / (1u64 << 20) as f64, r[key].as_f64()?)))
            .collect()
    };
    let copy = suite["copy_gbps"].as_f64().unwrap_or(0.0);
    chart(
        path,
        "linear (GEMV decode shapes): achieved bandwidth",
        ("bytes moved per call (MiB, log)", true),
        "GB/s",
        &[
            Series { label: "kiln", color: KILN, points: pts("gbps") },
            Series { label: "PyTorch", color: TORCH, points: pts("torch_gbps") },
        ],
        (copy, "measured copy bandwidth"),
    )
}

/// % of the bandwidth floor (floor µs / µs) per workload, in suite order.
fn latency(title: &str, list: &[Value], kiln_key: &str, path: &Path) -> Result<()> {
    let pts = |key: &str| -> Vec<(f64, f64)> {
        list.iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i as f64, 100.0 * r["floor_us"].as_f64()? / r[key].as_f64()?)))
            .collect()
    };
    chart(
        path,
        title,
        ("workload (suite order; names in the JSON)", false),
        "% of the bandwidth floor",
        &[
            Series { label: "kiln", color: KILN, points: pts(kiln_key) },
            Series { label: "PyTorch", color: TORCH, points: pts("torch_us") },
        ],
        (100.0, "floor"),
    )
}

/// Writes the charts `doc` has data for into `dir`; returns their paths.
pub fn write(doc: &Value, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io { path: dir.display().to_string(), source: e })?;
    let suites = &doc["suites"];
    let mut out = vec![];
    if suites["linear"].is_object() {
        out.push(dir.join("linear.svg"));
        linear(&suites["linear"], &out[out.len() - 1])?;
    }
    if suites["reductions"].is_object() {
        out.push(dir.join("reductions.svg"));
        latency(
            "reductions: share of the bandwidth floor",
            rows(&suites["reductions"], "results"),
            "kiln_us",
            &out[out.len() - 1],
        )?;
    }
    if suites["fp8"].is_object() {
        out.push(dir.join("fp8.svg"));
        latency(
            "scaled_mm: share of the bandwidth floor",
            rows(&suites["fp8"], "op_latency"),
            "us",
            &out[out.len() - 1],
        )?;
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
            ["linear.svg", "fp8.svg"]
        );
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("circle") && svg.contains("PyTorch"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
