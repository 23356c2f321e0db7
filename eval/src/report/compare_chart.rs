//! Several models side by side: per task (and per summary column) one bar per model with its
//! 95% interval as a whisker, and a black tick at the random baseline. Drawn like [`super::chart`].

use std::io::Cursor;

use plotters::prelude::*;

use super::chart::{HEIGHT, PALETTE, axes, draw_text, err, rect, text_width};

/// One model's bars, in the order of the chart's columns.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// Accuracy and its 95% interval per column, as fractions.
    pub bars: Vec<(f64, [f64; 2])>,
}

/// One column: its label and random baseline.
#[derive(Debug, Clone)]
pub struct Column {
    pub label: String,
    pub random: Option<f64>,
}

/// Renders the chart and returns the PNG bytes. Every series needs a bar per column.
pub fn render_png(title: &str, columns: &[Column], series: &[Series]) -> Result<Vec<u8>, String> {
    if let Some(s) = series.iter().find(|s| s.bars.len() != columns.len()) {
        return Err(format!("series {} has {} bars for {} columns", s.name, s.bars.len(), columns.len()));
    }
    let per_bar = 14;
    let slot = (series.len() as i32 * per_bar + 16).max(44);
    let (left, right, top) = (64, 24, 96);
    let width = (left + right + columns.len() as i32 * slot).max(640) as u32;
    let bottom = HEIGHT as i32 - 72;
    let mut buf = vec![0u8; width as usize * HEIGHT as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut buf, (width, HEIGHT)).into_drawing_area();
        area.fill(&WHITE).map_err(err)?;
        let scale = if text_width(title, 2) + 32 <= width as i32 { 2 } else { 1 };
        draw_text(&area, title, 16, 14, scale, &BLACK)?;
        let mut x = 16;
        for (i, s) in series.iter().enumerate() {
            rect(&area, (x, 60), (x + 12, 72), &PALETTE[i % PALETTE.len()])?;
            draw_text(&area, &s.name, x + 18, 62, 1, &BLACK)?;
            x += 18 + text_width(&s.name, 1) + 24;
        }
        rect(&area, (x, 65), (x + 14, 67), &BLACK)?;
        draw_text(&area, "random", x + 20, 62, 1, &BLACK)?;

        let plot_h = bottom - top;
        let y_of = |v: f64| bottom - (v.clamp(0.0, 1.0) * f64::from(plot_h)).round() as i32;
        axes(&area, (left, top), (width as i32 - right, bottom))?;

        for (c, column) in columns.iter().enumerate() {
            let x0 = left + c as i32 * slot + 8;
            for (i, s) in series.iter().enumerate() {
                let (acc, [lo, hi]) = s.bars[c];
                let bx = x0 + i as i32 * per_bar;
                let y = y_of(acc);
                if y < bottom {
                    rect(&area, (bx, y), (bx + per_bar - 3, bottom - 1), &PALETTE[i % PALETTE.len()])?;
                }
                let wx = bx + (per_bar - 3) / 2;
                area.draw(&PathElement::new(vec![(wx, y_of(lo)), (wx, y_of(hi))], BLACK)).map_err(err)?;
                for end in [lo, hi] {
                    area.draw(&PathElement::new(vec![(wx - 3, y_of(end)), (wx + 3, y_of(end))], BLACK)).map_err(err)?;
                }
            }
            let group = series.len() as i32 * per_bar;
            if let Some(r) = column.random {
                let ry = y_of(r);
                rect(&area, (x0 - 3, ry - 1), (x0 + group, ry + 1), &BLACK)?;
            }
            let cx = x0 + group / 2;
            draw_text(&area, &column.label, cx - text_width(&column.label, 1) / 2, bottom + 8, 1, &BLACK)?;
        }
        draw_text(&area, "accuracy (%) with 95% intervals; black ticks: random baseline", left, HEIGHT as i32 - 24, 1, &BLACK)?;
        area.present().map_err(err)?;
    }
    let image = image::RgbImage::from_raw(width, HEIGHT, buf).ok_or("pixel buffer of the wrong size")?;
    let mut png = Vec::new();
    image.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png).map_err(|e| e.to_string())?;
    Ok(png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png_and_refuses_a_series_without_a_bar_per_column() {
        let columns = vec![Column { label: "OE".into(), random: Some(0.25) }, Column { label: "All".into(), random: Some(0.25) }];
        let series = vec![Series { name: "a".into(), bars: vec![(0.5, [0.4, 0.6]), (0.3, [0.2, 0.4])] }];
        let png = render_png("t", &columns, &series).unwrap_or_else(|e| panic!("{e}"));
        let img = image::load_from_memory(&png).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(img.height(), HEIGHT);
        let short = vec![Series { name: "b".into(), bars: vec![(0.5, [0.4, 0.6])] }];
        assert!(render_png("t", &columns, &short).is_err());
    }
}
