//! The scene's obstacle point cloud: PLY (ASCII or binary, either byte order), XYZ text or
//! NumPy `.npy`, and a voxel grid that answers "is anything within r of this point" without
//! an all-pairs scan.
//!
//! - PLY: a `vertex` element with float/double `x`, `y`, `z`; other properties are skipped.
//! - XYZ (`.xyz`, `.txt`, `.pts`): one point a line, the first three numbers separated by
//!   spaces, tabs or commas; `#` starts a comment.
//! - `.npy`: `float32` or `float64`, shape `(N, 3)`, C order.

use std::collections::HashMap;
use std::path::Path;

use motionvl_util::files::write_atomic;

use super::error::DccsError;
use super::geom::V3;

/// Obstacle points, metres, z up.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PointCloud {
    pub points: Vec<V3>,
}

/// Reads a cloud by its extension; an empty cloud or a non-finite point is an error.
pub fn read_cloud(path: &Path) -> Result<PointCloud, DccsError> {
    let bad = |detail: String| DccsError::Cloud { path: path.to_path_buf(), detail };
    let bytes = std::fs::read(path).map_err(DccsError::io(path))?;
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let points = match ext.as_str() {
        "ply" => parse_ply(&bytes).map_err(bad)?,
        "npy" => parse_npy(&bytes).map_err(bad)?,
        "xyz" | "txt" | "pts" => parse_xyz(&bytes).map_err(bad)?,
        _ => {
            return Err(bad(format!("unknown point cloud extension `.{ext}` (expected .ply, .xyz, .txt, .pts or .npy)")));
        }
    };
    if points.is_empty() {
        return Err(bad("the point cloud is empty".into()));
    }
    if let Some(i) = points.iter().position(|p| !p.is_finite()) {
        return Err(bad(format!("point {i} is not finite")));
    }
    Ok(PointCloud { points })
}

fn parse_xyz(bytes: &[u8]) -> Result<Vec<V3>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let nums: Vec<&str> = line.split([' ', '\t', ',']).filter(|s| !s.is_empty()).take(3).collect();
        let parsed: Option<Vec<f64>> = nums.iter().map(|s| s.parse().ok()).collect();
        match parsed {
            Some(n) if n.len() == 3 => out.push(V3::new(n[0], n[1], n[2])),
            _ => return Err(format!("line {}: expected three numbers x y z", i + 1)),
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq)]
enum PlyFormat {
    Ascii,
    BinaryLe,
    BinaryBe,
}

fn ply_type_size(t: &str) -> Option<usize> {
    Some(match t {
        "char" | "uchar" | "int8" | "uint8" => 1,
        "short" | "ushort" | "int16" | "uint16" => 2,
        "int" | "uint" | "float" | "int32" | "uint32" | "float32" => 4,
        "double" | "float64" => 8,
        _ => return None,
    })
}

fn parse_ply(bytes: &[u8]) -> Result<Vec<V3>, String> {
    let end = bytes.windows(10).position(|w| w == b"end_header").ok_or("no `end_header` line: not a PLY file")?;
    let header = std::str::from_utf8(&bytes[..end]).map_err(|_| "the PLY header is not text".to_string())?;
    // The body starts after the newline that ends the `end_header` line.
    let body = bytes[end..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| end + i + 1);
    let mut lines = header.lines();
    if lines.next().map(str::trim) != Some("ply") {
        return Err("the file does not start with `ply`".into());
    }
    let mut format = None;
    // Elements in file order: name, count, properties (name, type).
    type Element = (String, usize, Vec<(String, String)>);
    let mut elements: Vec<Element> = Vec::new();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["format", f, _] => {
                format = Some(match *f {
                    "ascii" => PlyFormat::Ascii,
                    "binary_little_endian" => PlyFormat::BinaryLe,
                    "binary_big_endian" => PlyFormat::BinaryBe,
                    other => return Err(format!("unknown PLY format `{other}`")),
                })
            }
            ["element", name, count] => {
                let count = count.parse().map_err(|_| format!("element `{name}` has a bad count `{count}`"))?;
                elements.push((name.to_string(), count, Vec::new()));
            }
            ["property", "list", ..] => {
                let Some(e) = elements.last_mut() else {
                    return Err("property before any element".into());
                };
                if e.0 == "vertex" {
                    return Err("list properties on `vertex` are not supported".into());
                }
                e.2.push(("list".into(), "list".into()));
            }
            ["property", ty, name] => {
                let Some(e) = elements.last_mut() else {
                    return Err("property before any element".into());
                };
                e.2.push((name.to_string(), ty.to_string()));
            }
            _ => {}
        }
    }
    let format = format.ok_or("no `format` line")?;
    let Some(vi) = elements.iter().position(|e| e.0 == "vertex") else {
        return Err("no `vertex` element".into());
    };
    let (_, count, props) = &elements[vi];
    let axis = |n: &str| props.iter().position(|p| p.0 == n).ok_or(format!("`vertex` has no `{n}` property"));
    let (ix, iy, iz) = (axis("x")?, axis("y")?, axis("z")?);
    if format == PlyFormat::Ascii {
        let text = std::str::from_utf8(&bytes[body..]).map_err(|_| "the ASCII body is not text".to_string())?;
        let mut rows = text.lines().filter(|l| !l.trim().is_empty());
        // Elements before `vertex` take one line per item (a huge header count ends with the file).
        for e in &elements[..vi] {
            for i in 0..e.1 {
                rows.next().ok_or(format!("the file ends after {i} of the {} `{}` items before `vertex`", e.1, e.0))?;
            }
        }
        // The header's count is not trusted with memory: a vertex line has at least 6 bytes.
        let mut out = Vec::with_capacity((*count).min(text.len() / 6));
        for i in 0..*count {
            let row = rows.next().ok_or(format!("the file ends after {i} of {count} vertices"))?;
            let vals: Vec<&str> = row.split_whitespace().collect();
            let get = |k: usize| vals.get(k).and_then(|s| s.parse::<f64>().ok()).ok_or(format!("vertex {i}: bad number"));
            out.push(V3::new(get(ix)?, get(iy)?, get(iz)?));
        }
        return Ok(out);
    }
    if vi != 0 {
        return Err("binary PLY with elements before `vertex` is not supported".into());
    }
    let mut offsets = Vec::with_capacity(props.len());
    let mut stride = 0;
    for (name, ty) in props {
        let size = ply_type_size(ty).ok_or(format!("property `{name}` has unknown type `{ty}`"))?;
        offsets.push((stride, ty.as_str()));
        stride += size;
    }
    let need = stride.checked_mul(*count).and_then(|n| n.checked_add(body)).ok_or(format!("{count} vertices of {stride} bytes overflow"))?;
    if bytes.len() < need {
        return Err(format!("the binary body holds {} bytes, {count} vertices need {}", bytes.len() - body, need - body));
    }
    let read = |at: usize, ty: &str| -> Result<f64, String> {
        let b = &bytes[at..];
        let le = format == PlyFormat::BinaryLe;
        Ok(match ty {
            "float" | "float32" => {
                let a = [b[0], b[1], b[2], b[3]];
                f64::from(if le { f32::from_le_bytes(a) } else { f32::from_be_bytes(a) })
            }
            "double" | "float64" => {
                let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
                if le { f64::from_le_bytes(a) } else { f64::from_be_bytes(a) }
            }
            other => {
                return Err(format!("coordinates of type `{other}` are not supported (float or double)"));
            }
        })
    };
    (0..*count)
        .map(|i| {
            let base = body + i * stride;
            Ok(V3::new(
                read(base + offsets[ix].0, offsets[ix].1)?,
                read(base + offsets[iy].0, offsets[iy].1)?,
                read(base + offsets[iz].0, offsets[iz].1)?,
            ))
        })
        .collect()
}

fn parse_npy(bytes: &[u8]) -> Result<Vec<V3>, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes.get(start..start + len).ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| "the .npy header is not text".to_string())?;
    let descr = header_value(header, "descr").ok_or("no `descr` in the .npy header")?;
    let size = match descr.trim_matches(['\'', '"']) {
        "<f4" => 4,
        "<f8" => 8,
        other => {
            return Err(format!("dtype `{other}` is not supported (float32 or float64, little-endian)"));
        }
    };
    if header_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err("Fortran-ordered arrays are not supported".into());
    }
    let shape = header_value(header, "shape").ok_or("no `shape` in the .npy header")?;
    let dims: Vec<usize> = shape
        .trim_matches(['(', ')'])
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().map_err(|_| format!("bad shape `{shape}`")))
        .collect::<Result<_, _>>()?;
    let n = match dims.as_slice() {
        [n, 3] => *n,
        _ => return Err(format!("shape {shape} is not (N, 3)")),
    };
    let data = &bytes[start + len..];
    let need = n.checked_mul(3 * size).ok_or(format!("shape {shape} overflows"))?;
    if data.len() < need {
        return Err(format!("the data holds {} bytes, shape {shape} needs {need}", data.len()));
    }
    let get = |k: usize| -> f64 {
        let b = &data[k * size..];
        if size == 4 {
            f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        }
    };
    Ok((0..n).map(|i| V3::new(get(3 * i), get(3 * i + 1), get(3 * i + 2))).collect())
}

/// The text after `'key':` up to the next top-level comma of a NumPy header dict.
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') { rest.find(')')? + 1 } else { rest.find([',', '}']).unwrap_or(rest.len()) };
    Some(rest[..end].trim())
}

/// Writes `x y z` float vertices as PLY, binary little-endian or ASCII.
pub fn write_ply(path: &Path, points: &[V3], binary: bool) -> Result<(), DccsError> {
    let format = if binary { "binary_little_endian" } else { "ascii" };
    let mut out =
        format!("ply\nformat {format} 1.0\nelement vertex {}\nproperty float x\nproperty float y\nproperty float z\nend_header\n", points.len())
            .into_bytes();
    for p in points {
        if binary {
            for c in p.to_array() {
                out.extend_from_slice(&(c as f32).to_le_bytes());
            }
        } else {
            out.extend_from_slice(format!("{} {} {}\n", p.x as f32, p.y as f32, p.z as f32).as_bytes());
        }
    }
    Ok(write_atomic(path, &out)?)
}

/// Points bucketed into cubes of one size, for radius queries that look at 27 cubes only.
#[derive(Debug, Clone)]
pub struct VoxelGrid {
    cell: f64,
    cells: HashMap<(i64, i64, i64), Vec<V3>>,
}

impl VoxelGrid {
    /// A grid with cubes of side `cell` metres; queries are exact for radii up to `cell`.
    pub fn new(points: &[V3], cell: f64) -> Self {
        let mut cells: HashMap<(i64, i64, i64), Vec<V3>> = HashMap::new();
        for &p in points {
            cells.entry(Self::key(p, cell)).or_default().push(p);
        }
        VoxelGrid { cell, cells }
    }

    fn key(p: V3, cell: f64) -> (i64, i64, i64) {
        ((p.x / cell).floor() as i64, (p.y / cell).floor() as i64, (p.z / cell).floor() as i64)
    }

    /// The nearest point closer than `radius` (at most the cell size) to `p`, and its distance.
    pub fn nearest_within(&self, p: V3, radius: f64) -> Option<(V3, f64)> {
        debug_assert!(radius <= self.cell + 1e-9, "radius {radius} beyond the cell size {}", self.cell);
        let (kx, ky, kz) = Self::key(p, self.cell);
        let mut best: Option<(V3, f64)> = None;
        for dx in -1..=1 {
            for dy in -1..=1 {
                for dz in -1..=1 {
                    let Some(bucket) = self.cells.get(&(kx + dx, ky + dy, kz + dz)) else {
                        continue;
                    };
                    for &q in bucket {
                        let d = (q - p).length();
                        if d < radius && best.is_none_or(|(_, b)| d < b) {
                            best = Some((q, d));
                        }
                    }
                }
            }
        }
        best
    }
}
