//! `chart.png`: one bar per task (accuracy in %, coloured by dimension) with a black tick at the
//! task's random baseline, and a grey bar for the overall accuracy.
//!
//! Drawn with plotters' bitmap backend. Plotters' text needs a font backend, and every one of
//! them either reads system fonts (font-kit, which fails on a bare server) or needs a font file
//! shipped in the binary; this chart instead draws its few labels from font8x8's public-domain
//! 8×8 bitmaps, pixel by pixel, so it renders the same everywhere with no font installed.

use std::io::Cursor;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::short_label;
use crate::results::Results;

pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
pub(crate) type Draw = Result<(), String>;

/// Dimension colours (Okabe–Ito, readable by colour-blind viewers), in breakdown order.
pub(crate) const PALETTE: [RGBColor; 6] =
    [RGBColor(0, 114, 178), RGBColor(230, 159, 0), RGBColor(0, 158, 115), RGBColor(204, 121, 167), RGBColor(86, 180, 233), RGBColor(213, 94, 0)];
const OVERALL: RGBColor = RGBColor(96, 96, 96);
const GRID: RGBColor = RGBColor(225, 225, 225);
pub(crate) const HEIGHT: u32 = 480;

pub(crate) fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

/// Pixel width of `text` at `scale` (8 px per character).
pub(crate) fn text_width(text: &str, scale: i32) -> i32 {
    text.chars().count() as i32 * 8 * scale
}

/// The 8×8 bitmap of a character (Latin-1 range; anything else draws as `?`).
fn glyph(c: char) -> [u8; 8] {
    let code = c as usize;
    if code < 128 {
        font8x8::legacy::BASIC_LEGACY[code]
    } else if (0xA0..0x100).contains(&code) {
        font8x8::legacy::LATIN_LEGACY[code - 0xA0]
    } else {
        font8x8::legacy::BASIC_LEGACY[b'?' as usize]
    }
}

/// Draws `text` with its top-left corner at (x, y), each font pixel a `scale`×`scale` square.
pub(crate) fn draw_text(area: &Area<'_>, text: &str, x: i32, y: i32, scale: i32, color: &RGBColor) -> Draw {
    let (w, h) = area.dim_in_pixel();
    for (i, c) in text.chars().enumerate() {
        let gx = x + i as i32 * 8 * scale;
        for (row, bits) in glyph(c).iter().enumerate() {
            for col in 0..8 {
                if bits & (1 << col) == 0 {
                    continue;
                }
                for dy in 0..scale {
                    for dx in 0..scale {
                        let (px, py) = (gx + col * scale + dx, y + row as i32 * scale + dy);
                        if px >= 0 && py >= 0 && (px as u32) < w && (py as u32) < h {
                            area.draw_pixel((px, py), color).map_err(err)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn rect(area: &Area<'_>, (x0, y0): (i32, i32), (x1, y1): (i32, i32), color: &RGBColor) -> Draw {
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], color.filled())).map_err(err)
}

/// Axes and grid lines of a 0–100 % plot from `(left, top)` to `(right, bottom)`.
pub(crate) fn axes(area: &Area<'_>, (left, top): (i32, i32), (right, bottom): (i32, i32)) -> Draw {
    for tick in 0..=5 {
        let y = bottom - (f64::from(tick) / 5.0 * f64::from(bottom - top)).round() as i32;
        area.draw(&PathElement::new(vec![(left, y), (right, y)], GRID)).map_err(err)?;
        let label = format!("{}", tick * 20);
        draw_text(area, &label, left - 8 - text_width(&label, 1), y - 4, 1, &BLACK)?;
    }
    area.draw(&PathElement::new(vec![(left, top), (left, bottom)], BLACK)).map_err(err)?;
    area.draw(&PathElement::new(vec![(left, bottom), (right, bottom)], BLACK)).map_err(err)
}

/// Renders the chart of a run and returns the PNG bytes.
pub fn render_png(results: &Results) -> Result<Vec<u8>, String> {
    let tasks: Vec<(String, f64, Option<f64>, usize)> = results
        .by_task
        .iter()
        .map(|(name, e)| {
            let dim = results.by_dimension.iter().position(|(d, _)| Some(d) == e.dimension.as_ref()).unwrap_or(0);
            (short_label(&results.benchmark, name), e.accuracy, e.random, dim)
        })
        .collect();
    let slots = tasks.len() as i32 + 2; // the tasks, a gap, the overall bar
    let slot = 56;
    let (left, right, top) = (64, 24, 96);
    let width = (left + right + slots * slot).max(640) as u32;
    let bottom = HEIGHT as i32 - 72;
    let mut buf = vec![0u8; width as usize * HEIGHT as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut buf, (width, HEIGHT)).into_drawing_area();
        area.fill(&WHITE).map_err(err)?;
        let title = format!("{} - {}", results.title, results.run);
        let scale = if text_width(&title, 2) + 32 <= width as i32 { 2 } else { 1 };
        draw_text(&area, &title, 16, 14, scale, &BLACK)?;
        let summary = format!(
            "overall {:.1}% over {} questions{}",
            100.0 * results.overall.accuracy,
            results.questions,
            results.overall.random.map(|r| format!(", random {:.1}%", 100.0 * r)).unwrap_or_default()
        );
        draw_text(&area, &summary, 16, 40, 1, &BLACK)?;
        // Legend: one swatch per dimension.
        let mut x = 16;
        for (i, (dim, _)) in results.by_dimension.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            rect(&area, (x, 60), (x + 12, 72), &color)?;
            draw_text(&area, dim, x + 18, 62, 1, &BLACK)?;
            x += 18 + text_width(dim, 1) + 24;
        }
        rect(&area, (x, 60), (x + 12, 72), &OVERALL)?;
        draw_text(&area, "overall", x + 18, 62, 1, &BLACK)?;
        x += 18 + text_width("overall", 1) + 24;
        rect(&area, (x, 65), (x + 14, 67), &BLACK)?;
        draw_text(&area, "random", x + 20, 62, 1, &BLACK)?;

        let plot_h = bottom - top;
        let y_of = |v: f64| bottom - (v.clamp(0.0, 1.0) * f64::from(plot_h)).round() as i32;
        axes(&area, (left, top), (width as i32 - right, bottom))?;

        let mut bars: Vec<(String, f64, Option<f64>, RGBColor)> =
            tasks.iter().map(|(s, a, r, d)| (s.clone(), *a, *r, PALETTE[d % PALETTE.len()])).collect();
        bars.push((String::new(), f64::NAN, None, WHITE));
        bars.push(("All".to_string(), results.overall.accuracy, results.overall.random, OVERALL));
        for (i, (label, acc, random, color)) in bars.iter().enumerate() {
            if acc.is_nan() {
                continue;
            }
            let cx = left + i as i32 * slot + slot / 2 + 4;
            let half = slot * 3 / 10;
            let y = y_of(*acc);
            if y < bottom {
                rect(&area, (cx - half, y), (cx + half, bottom - 1), color)?;
            }
            if let Some(r) = random {
                let ry = y_of(*r);
                rect(&area, (cx - half - 4, ry - 1), (cx + half + 4, ry + 1), &BLACK)?;
            }
            let value = format!("{:.1}", 100.0 * acc);
            draw_text(&area, &value, cx - text_width(&value, 1) / 2, y - 12, 1, &BLACK)?;
            draw_text(&area, label, cx - text_width(label, 1) / 2, bottom + 8, 1, &BLACK)?;
        }
        draw_text(&area, "accuracy (%) per task; black ticks: random baseline", left, HEIGHT as i32 - 24, 1, &BLACK)?;
        area.present().map_err(err)?;
    }
    let image = image::RgbImage::from_raw(width, HEIGHT, buf).ok_or("pixel buffer of the wrong size")?;
    let mut png = Vec::new();
    image.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png).map_err(|e| e.to_string())?;
    Ok(png)
}
