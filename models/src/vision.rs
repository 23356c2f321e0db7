//! The Qwen2.5-VL vision tower: patch embedding → blocks with 2D rotary window attention (full
//! attention in `fullatt_block_indexes`) → 2×2 patch merger to the language width.
//!
//! Patches arrive in the processor's order, where every 4 consecutive rows form one 2×2 merge
//! unit. Window attention reorders the merge units window by window once before the first
//! block; the merger output is put back into the processor's order at the end.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

use crate::chunked_attention;
use crate::config::VisionConfig;
use crate::error::ModelError;
use crate::fused::attention as fused;
use crate::ops::{GatedMlp, Linear, RmsNorm, apply_rotary};

/// Vision RMSNorm eps is fixed in the reference, whatever the config says.
const VISION_NORM_EPS: f64 = 1e-6;

/// The Conv3d patch embedding (kernel = stride = temporal_patch × patch × patch, no bias),
/// written as a matmul over the already-flattened patches.
#[derive(Debug, Clone)]
pub struct PatchEmbed {
    weight: Tensor, // [hidden, C·Tp·P·P]
}

impl PatchEmbed {
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (c, tp, p) = (cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size);
        let weight = vb.pp("proj").get((cfg.hidden_size, c, tp, p, p), "weight")?;
        Ok(Self { weight: weight.reshape((cfg.hidden_size, c * tp * p * p))? })
    }

    pub fn forward(&self, pixel_values: &Tensor) -> Result<Tensor> {
        pixel_values.to_dtype(self.weight.dtype())?.matmul(&self.weight.t()?)
    }
}

/// Where each patch sits and how attention is segmented, for a list of `[t, h, w]` grids.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionLayout {
    /// Merge units in window order: `window_index[i]` is the original unit placed at `i`.
    pub window_index: Vec<usize>,
    /// Cumulative window lengths in patches (window order, empty windows dropped).
    pub cu_window_seqlens: Vec<usize>,
    /// Cumulative per-frame lengths in patches, for the full-attention blocks.
    pub cu_seqlens: Vec<usize>,
    /// `(row, column)` of every patch, in the processor's order.
    pub rot_pos_ids: Vec<[usize; 2]>,
}

impl VisionLayout {
    pub fn new(grids: &[[usize; 3]], cfg: &VisionConfig) -> std::result::Result<Self, ModelError> {
        let merge = cfg.spatial_merge_size;
        let unit = cfg.merge_unit();
        let window = cfg.window_size / cfg.spatial_merge_size / cfg.patch_size;
        let frames = FramePatches::new(grids, merge)?;
        let mut layout = Self { window_index: vec![], cu_window_seqlens: vec![0], cu_seqlens: frames.cu_seqlens, rot_pos_ids: frames.rot_pos_ids };
        let mut units_before = 0;
        for &[t, h, w] in grids {
            let (mh, mw) = (h / merge, w / merge);
            // Windows of `window × window` merge units, tiled from the top-left of every frame.
            for ti in 0..t {
                for wy in (0..mh).step_by(window) {
                    for wx in (0..mw).step_by(window) {
                        let mut count = 0;
                        for y in wy..(wy + window).min(mh) {
                            for x in wx..(wx + window).min(mw) {
                                layout.window_index.push(units_before + (ti * mh + y) * mw + x);
                                count += 1;
                            }
                        }
                        let end = layout.cu_window_seqlens.last().copied().unwrap_or(0) + count * unit;
                        layout.cu_window_seqlens.push(end);
                    }
                }
            }
            units_before += t * mh * mw;
        }
        Ok(layout)
    }

    pub fn num_patches(&self) -> usize {
        self.rot_pos_ids.len()
    }
}

/// The patches of a list of `[t, h, w]` grids in the processor's order (every `merge²`
/// consecutive rows one merge unit): each patch's `(row, column)` and the frames' boundaries.
#[derive(Debug, Clone, PartialEq)]
pub struct FramePatches {
    pub rot_pos_ids: Vec<[usize; 2]>,
    /// Cumulative per-frame lengths in patches (attention never crosses a frame).
    pub cu_seqlens: Vec<usize>,
}

impl FramePatches {
    pub fn new(grids: &[[usize; 3]], merge: usize) -> std::result::Result<Self, ModelError> {
        let mut out = Self { rot_pos_ids: vec![], cu_seqlens: vec![0] };
        for (i, &[t, h, w]) in grids.iter().enumerate() {
            if t == 0 || h == 0 || w == 0 || h % merge != 0 || w % merge != 0 {
                return Err(ModelError::Pixels {
                    problem: format!("vision grid {i} is {:?}: every side must be positive and h, w multiples of the merge size {merge}", [t, h, w]),
                });
            }
            for _ in 0..t {
                for bh in 0..h / merge {
                    for bw in 0..w / merge {
                        for dh in 0..merge {
                            for dw in 0..merge {
                                out.rot_pos_ids.push([bh * merge + dh, bw * merge + dw]);
                            }
                        }
                    }
                }
                let frame_end = out.cu_seqlens.last().copied().unwrap_or(0) + h * w;
                out.cu_seqlens.push(frame_end);
            }
        }
        Ok(out)
    }
}

/// cos/sin `[N, 1, head_dim]` (f32) of the towers' 2D rotary embedding for patches at `(row,
/// column)`: the first quarter of the frequencies rotates by row, the second by column, and the
/// pattern repeats (rotate-half).
pub(crate) fn rotary_2d(
    head_dim: usize,
    theta: f64,
    positions: impl ExactSizeIterator<Item = [usize; 2]>,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let quarter = head_dim / 4;
    let inv_freq: Vec<f32> = (0..quarter).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / (head_dim / 2) as f32)).collect();
    let n = positions.len();
    let mut cos = Vec::with_capacity(n * head_dim);
    let mut sin = Vec::with_capacity(n * head_dim);
    let mut angles = vec![0f32; head_dim / 2];
    for [h, w] in positions {
        for (i, f) in inv_freq.iter().enumerate() {
            angles[i] = h as f32 * f;
            angles[quarter + i] = w as f32 * f;
        }
        for _ in 0..2 {
            cos.extend(angles.iter().map(|a| a.cos()));
            sin.extend(angles.iter().map(|a| a.sin()));
        }
    }
    let shape = (n, 1, head_dim);
    Ok((Tensor::from_vec(cos, shape, device)?, Tensor::from_vec(sin, shape, device)?))
}

/// Rows of a sequence split into independent attention segments. Segments of equal length are
/// batched together, so a video with hundreds of windows costs a handful of matmuls.
pub(crate) struct Segments {
    /// Cumulative row offsets of the segments, as the layout gives them.
    cu_seqlens: Vec<usize>,
    /// Row order that lays the segments out group by group; `None` when already in that order.
    gather: Option<Tensor>,
    /// Inverse of `gather`.
    scatter: Option<Tensor>,
    /// `(segment length, number of segments)` per group, in gathered order.
    groups: Vec<(usize, usize)>,
}

impl Segments {
    pub(crate) fn new(cu_seqlens: &[usize], device: &Device) -> Result<Self> {
        let mut lengths: Vec<usize> = cu_seqlens.windows(2).map(|w| w[1] - w[0]).filter(|&l| l > 0).collect();
        lengths.sort_unstable();
        lengths.dedup();
        let mut order = Vec::new();
        let mut groups = Vec::new();
        for &len in &lengths {
            let mut count = 0;
            for w in cu_seqlens.windows(2).filter(|w| w[1] - w[0] == len) {
                order.extend((w[0]..w[1]).map(|r| r as u32));
                count += 1;
            }
            groups.push((len, count));
        }
        let identity = order.iter().enumerate().all(|(i, &r)| i as u32 == r);
        let (gather, scatter) = if identity {
            (None, None)
        } else {
            let mut inverse = vec![0u32; order.len()];
            for (i, &r) in order.iter().enumerate() {
                inverse[r as usize] = i as u32;
            }
            (Some(Tensor::new(order, device)?), Some(Tensor::new(inverse, device)?))
        };
        Ok(Self { cu_seqlens: cu_seqlens.to_vec(), gather, scatter, groups })
    }
}

#[derive(Debug, Clone)]
pub struct VisionAttention {
    qkv: Linear,
    proj: Linear,
    num_heads: usize,
    head_dim: usize,
}

impl VisionAttention {
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        Self::with_width(cfg.hidden_size, cfg.num_heads, vb)
    }

    /// Attention of `num_heads` heads over a `dim`-wide stream (both towers' `attn`).
    pub fn with_width(dim: usize, num_heads: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            qkv: Linear::new(dim, 3 * dim, true, vb.pp("qkv"))?,
            proj: Linear::new(dim, dim, true, vb.pp("proj"))?,
            num_heads,
            head_dim: dim / num_heads,
        })
    }

    pub(crate) fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        out.push((format!("{prefix}.qkv"), &mut self.qkv));
        out.push((format!("{prefix}.proj"), &mut self.proj));
    }

    /// `xs`: [N, dim]; `cos`/`sin`: [N, 1, head_dim].
    pub(crate) fn forward(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor, segments: &Segments) -> Result<Tensor> {
        let n = xs.dim(0)?;
        let qkv = self.qkv.forward(xs)?.reshape((n, 3, self.num_heads, self.head_dim))?;
        let part = |i: usize| qkv.narrow(1, i, 1)?.squeeze(1)?.contiguous();
        let q = apply_rotary(&part(0)?, cos, sin)?;
        let k = apply_rotary(&part(1)?, cos, sin)?;
        let v = part(2)?;
        let scale = (self.head_dim as f64).powf(-0.5);
        if let Some(out) = crate::flash::segments(&q, &k, &v, &segments.cu_seqlens, scale)? {
            return self.proj.forward(&out.reshape((n, self.num_heads * self.head_dim))?);
        }
        if fused::applies(&q, &k, &v) {
            // [N, H, D] read as [1, H, N, D] in place; the result comes back laid out [1, N, H, D].
            let heads = |t: &Tensor| t.unsqueeze(0)?.transpose(1, 2);
            let mask = fused::Mask::Segments(segments.cu_seqlens.clone());
            let out = fused::attention(&heads(&q)?, &heads(&k)?, &heads(&v)?, scale, &mask)?;
            return self.proj.forward(&out.transpose(1, 2)?.reshape((n, self.num_heads * self.head_dim))?);
        }
        let (q, k, v) = match &segments.gather {
            Some(g) => (q.index_select(g, 0)?, k.index_select(g, 0)?, v.index_select(g, 0)?),
            None => (q, k, v),
        };
        let mut outputs = Vec::with_capacity(segments.groups.len());
        let mut offset = 0;
        for &(len, count) in &segments.groups {
            // [count·len, H, D] → [count, H, len, D]
            let take = |x: &Tensor| -> Result<Tensor> {
                x.narrow(0, offset, count * len)?.reshape((count, len, self.num_heads, self.head_dim))?.transpose(1, 2)?.contiguous()
            };
            let out = chunked_attention::attention(&take(&q)?, &take(&k)?, &take(&v)?, scale, &fused::Mask::Full)?;
            outputs.push(out.transpose(1, 2)?.reshape((count * len, self.num_heads * self.head_dim))?);
            offset += count * len;
        }
        let out = Tensor::cat(&outputs, 0)?;
        let out = match &segments.scatter {
            Some(s) => out.index_select(s, 0)?,
            None => out,
        };
        self.proj.forward(&out)
    }
}

#[derive(Debug, Clone)]
pub struct VisionBlock {
    norm1: RmsNorm,
    attn: VisionAttention,
    norm2: RmsNorm,
    mlp: GatedMlp,
}

impl VisionBlock {
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm1: RmsNorm::new(cfg.hidden_size, VISION_NORM_EPS, vb.pp("norm1"))?,
            attn: VisionAttention::new(cfg, vb.pp("attn"))?,
            norm2: RmsNorm::new(cfg.hidden_size, VISION_NORM_EPS, vb.pp("norm2"))?,
            mlp: GatedMlp::new(cfg.hidden_size, cfg.intermediate_size, true, cfg.hidden_act, vb.pp("mlp"))?,
        })
    }

    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        self.attn.linears_mut(&format!("{prefix}.attn"), out);
        self.mlp.linears_mut(&format!("{prefix}.mlp"), out);
    }

    fn forward(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor, segments: &Segments) -> Result<Tensor> {
        let xs = (xs + self.attn.forward(&self.norm1.forward(xs)?, cos, sin, segments)?)?;
        &xs + self.mlp.forward(&self.norm2.forward(&xs)?)?
    }
}

/// RMSNorm per patch, 2×2 patches concatenated, then Linear → GELU(erf) → Linear.
#[derive(Debug, Clone)]
pub struct PatchMerger {
    ln_q: RmsNorm,
    fc1: Linear,
    fc2: Linear,
    merged_dim: usize,
}

impl PatchMerger {
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let merged_dim = cfg.hidden_size * cfg.merge_unit();
        Ok(Self {
            ln_q: RmsNorm::new(cfg.hidden_size, VISION_NORM_EPS, vb.pp("ln_q"))?,
            fc1: Linear::new(merged_dim, merged_dim, true, vb.pp("mlp.0"))?,
            fc2: Linear::new(merged_dim, cfg.out_hidden_size, true, vb.pp("mlp.2"))?,
            merged_dim,
        })
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let xs = self.ln_q.forward(xs)?;
        let xs = xs.reshape((xs.dim(0)? / (self.merged_dim / xs.dim(1)?), self.merged_dim))?;
        self.fc2.forward(&self.fc1.forward(&xs)?.gelu_erf()?)
    }
}

/// Intermediate results of one tower pass, all in the processor's patch order.
pub struct VisionTrace {
    pub patch_embed: Tensor,
    pub blocks: Vec<Tensor>,
    pub output: Tensor,
}

#[derive(Debug, Clone)]
pub struct VisionTower {
    patch_embed: PatchEmbed,
    blocks: Vec<VisionBlock>,
    merger: PatchMerger,
    cfg: VisionConfig,
}

impl VisionTower {
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = (0..cfg.depth).map(|i| VisionBlock::new(cfg, vb.pp(format!("blocks.{i}")))).collect::<Result<_>>()?;
        Ok(Self {
            patch_embed: PatchEmbed::new(cfg, vb.pp("patch_embed"))?,
            blocks,
            merger: PatchMerger::new(cfg, vb.pp("merger"))?,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    pub fn dtype(&self) -> DType {
        self.patch_embed.weight.dtype()
    }

    /// `pixel_values`: [Σ t·h·w, C·Tp·P·P] in the processor's order → [Σ t·h·w / 4, out_hidden].
    pub fn forward(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> crate::Result<Tensor> {
        Ok(self.run(pixel_values, grids, false)?.output)
    }

    /// Like [`forward`](Self::forward), also returning the patch embedding and every block's output.
    pub fn forward_traced(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> crate::Result<VisionTrace> {
        self.run(pixel_values, grids, true)
    }

    fn run(&self, pixel_values: &Tensor, grids: &[[usize; 3]], trace: bool) -> crate::Result<VisionTrace> {
        let layout = VisionLayout::new(grids, &self.cfg)?;
        let expected = [layout.num_patches(), self.cfg.patch_dim()];
        if pixel_values.dims() != expected {
            return Err(ModelError::Pixels {
                problem: format!("pixel values have shape {:?}, the grids {grids:?} need {expected:?}", pixel_values.dims()),
            });
        }
        let device = pixel_values.device();
        let unit = self.cfg.merge_unit();
        let patch_order: Vec<u32> = layout.window_index.iter().flat_map(|&u| (u * unit..(u + 1) * unit).map(|r| r as u32)).collect();
        let mut patch_inverse = vec![0u32; patch_order.len()];
        for (i, &r) in patch_order.iter().enumerate() {
            patch_inverse[r as usize] = i as u32;
        }
        let mut unit_inverse = vec![0u32; layout.window_index.len()];
        for (i, &u) in layout.window_index.iter().enumerate() {
            unit_inverse[u] = i as u32;
        }
        let patch_order_t = Tensor::new(patch_order.as_slice(), device)?;
        let patch_inverse = Tensor::new(patch_inverse, device)?;

        let embedded = self.patch_embed.forward(pixel_values)?;
        let mut xs = embedded.index_select(&patch_order_t, 0)?;
        let (cos, sin) = self.rotary(&layout, &patch_order, device)?;
        let windows = Segments::new(&layout.cu_window_seqlens, device)?;
        let frames = Segments::new(&layout.cu_seqlens, device)?;
        let mut block_outputs = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let segments = if self.cfg.fullatt_block_indexes.contains(&i) { &frames } else { &windows };
            xs = block.forward(&xs, &cos, &sin, segments)?;
            if trace {
                block_outputs.push(xs.index_select(&patch_inverse, 0)?);
            }
        }
        let merged = self.merger.forward(&xs)?;
        let output = merged.index_select(&Tensor::new(unit_inverse, device)?, 0)?;
        Ok(VisionTrace { patch_embed: embedded, blocks: block_outputs, output })
    }

    /// cos/sin of the 2D rotary embedding, [N, 1, head_dim] in window order.
    fn rotary(&self, layout: &VisionLayout, patch_order: &[u32], device: &Device) -> Result<(Tensor, Tensor)> {
        rotary_2d(self.cfg.head_dim(), self.cfg.rope_theta, patch_order.iter().map(|&row| layout.rot_pos_ids[row as usize]), device)
    }
}

/// A vision tower whose linear layers LoRA adapts, listed by checkpoint path.
pub trait AdaptableTower: Clone {
    /// Every linear layer with its checkpoint path below `prefix` (e.g. `visual.blocks.0.mlp.gate_proj`).
    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>);

    /// The tower with its base weights only (any LoRA adapters removed).
    fn without_adapters(&self) -> Self {
        let mut tower = self.clone();
        let mut linears = Vec::new();
        tower.linears_mut("visual", &mut linears);
        for (_, linear) in linears {
            linear.set_adapter(None);
        }
        tower
    }
}

impl AdaptableTower for VisionTower {
    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        for (i, block) in self.blocks.iter_mut().enumerate() {
            block.linears_mut(&format!("{prefix}.blocks.{i}"), out);
        }
        out.push((format!("{prefix}.merger.mlp.0"), &mut self.merger.fc1));
        out.push((format!("{prefix}.merger.mlp.2"), &mut self.merger.fc2));
    }
}
