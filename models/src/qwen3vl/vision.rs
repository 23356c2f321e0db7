//! The Qwen3-VL vision tower: Conv3d patch embedding (with bias) plus a learned position table
//! bilinearly resampled to each grid → LayerNorm blocks with 2D rotary attention inside each
//! frame → 2×2 patch merger to the language width, and DeepStack mergers on the outputs of the
//! blocks `deepstack_visual_indexes` names.
//!
//! Patches arrive in the processor's order, where every 4 consecutive rows form one 2×2 merge
//! unit; with no window attention the tower keeps that order throughout.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::Qwen3VisionConfig;
use crate::config::Activation;
use crate::error::ModelError;
use crate::ops::{LayerNorm, Linear};
use crate::vision::{AdaptableTower, FramePatches, Segments, VisionAttention, rotary_2d};

/// LayerNorm eps of every norm in the tower (fixed in the reference).
const NORM_EPS: f64 = 1e-6;

/// The Conv3d patch embedding (kernel = stride = temporal_patch × patch × patch, with bias),
/// written as a matmul over the already-flattened patches.
#[derive(Debug, Clone)]
pub struct PatchEmbed {
    proj: Linear, // weight [hidden, C·Tp·P·P]
}

impl PatchEmbed {
    pub fn new(cfg: &Qwen3VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (c, tp, p) = (cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size);
        let vb = vb.pp("proj");
        let weight = vb.get((cfg.hidden_size, c, tp, p, p), "weight")?.reshape((cfg.hidden_size, c * tp * p * p))?;
        Ok(Self { proj: Linear::from_parts(weight, Some(vb.get(cfg.hidden_size, "bias")?)) })
    }

    pub fn forward(&self, pixel_values: &Tensor) -> Result<Tensor> {
        self.proj.forward(&pixel_values.to_dtype(self.proj.weight().dtype())?)
    }
}

/// The learned `side × side` position table, resampled to a grid as `F.interpolate(mode=
/// "bilinear", align_corners=True)` would: each patch mixes the four table entries around its
/// point with weights computed in f32 exactly as transformers' `vision_utils` does.
#[derive(Debug, Clone)]
pub struct PositionEmbedding {
    table: Tensor, // [side², hidden]
    side: usize,
}

impl PositionEmbedding {
    pub fn new(cfg: &Qwen3VisionConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self { table: vb.get((cfg.num_position_embeddings, cfg.hidden_size), "weight")?, side: cfg.position_grid_side() })
    }

    /// `[N, hidden]` for patches at `(row, column)` of grids `h × w` (`sizes`, per patch).
    pub fn forward(&self, patches: &FramePatches, sizes: &[[usize; 2]]) -> Result<Tensor> {
        let n = patches.rot_pos_ids.len();
        let mut indices = Vec::with_capacity(4 * n);
        let mut weights = Vec::with_capacity(4 * n);
        for (&[row, col], &[h, w]) in patches.rot_pos_ids.iter().zip(sizes) {
            let (rows, row_weights) = self.taps(row, h);
            let (cols, col_weights) = self.taps(col, w);
            for (r, rw) in rows.iter().zip(row_weights) {
                for (c, cw) in cols.iter().zip(col_weights) {
                    indices.push((r * self.side + c) as u32);
                    weights.push(rw * cw);
                }
            }
        }
        let device = self.table.device();
        let hidden = self.table.dim(1)?;
        let gathered = self.table.index_select(&Tensor::from_vec(indices, 4 * n, device)?, 0)?.reshape((n, 4, hidden))?;
        let weights = Tensor::from_vec(weights, (n, 4, 1), device)?.to_dtype(self.table.dtype())?;
        gathered.broadcast_mul(&weights)?.sum(1)
    }

    /// The two table rows around position `index` of an axis of `size`, and their weights.
    fn taps(&self, index: usize, size: usize) -> ([usize; 2], [f32; 2]) {
        let src = index as f32 * (self.side - 1) as f32 / (size.max(2) - 1) as f32;
        let floor = src.floor();
        let taps = [floor as usize, floor as usize + 1].map(|t| t.min(self.side - 1));
        let weights = [0.0, 1.0].map(|offset: f32| (1.0 - (src - floor - offset).abs()).max(0.0));
        (taps, weights)
    }
}

/// `fc2(act(fc1(x)))`, the blocks' MLP.
#[derive(Debug, Clone)]
pub struct VisionMlp {
    linear_fc1: Linear,
    linear_fc2: Linear,
    act: Activation,
}

impl VisionMlp {
    pub fn new(cfg: &Qwen3VisionConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            linear_fc1: Linear::new(cfg.hidden_size, cfg.intermediate_size, true, vb.pp("linear_fc1"))?,
            linear_fc2: Linear::new(cfg.intermediate_size, cfg.hidden_size, true, vb.pp("linear_fc2"))?,
            act: cfg.hidden_act,
        })
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.linear_fc2.forward(&self.act.apply(&self.linear_fc1.forward(xs)?)?)
    }
}

#[derive(Debug, Clone)]
pub struct VisionBlock {
    norm1: LayerNorm,
    attn: VisionAttention,
    norm2: LayerNorm,
    mlp: VisionMlp,
}

impl VisionBlock {
    pub fn new(cfg: &Qwen3VisionConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm1: LayerNorm::new(cfg.hidden_size, NORM_EPS, vb.pp("norm1"))?,
            attn: VisionAttention::with_width(cfg.hidden_size, cfg.num_heads, vb.pp("attn"))?,
            norm2: LayerNorm::new(cfg.hidden_size, NORM_EPS, vb.pp("norm2"))?,
            mlp: VisionMlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        self.attn.linears_mut(&format!("{prefix}.attn"), out);
        out.push((format!("{prefix}.mlp.linear_fc1"), &mut self.mlp.linear_fc1));
        out.push((format!("{prefix}.mlp.linear_fc2"), &mut self.mlp.linear_fc2));
    }

    fn forward(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor, frames: &Segments) -> Result<Tensor> {
        let xs = (xs + self.attn.forward(&self.norm1.forward(xs)?, cos, sin, frames)?)?;
        &xs + self.mlp.forward(&self.norm2.forward(&xs)?)?
    }
}

/// Where a merger normalises: per patch before the 2×2 units are concatenated (the main merger),
/// or over the concatenated unit (the DeepStack mergers' `use_postshuffle_norm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergerNorm {
    PerPatch,
    PerUnit,
}

/// LayerNorm, 2×2 patches concatenated, then Linear → GELU(erf) → Linear to the text width.
#[derive(Debug, Clone)]
pub struct PatchMerger {
    norm: LayerNorm,
    linear_fc1: Linear,
    linear_fc2: Linear,
    placement: MergerNorm,
    merged_dim: usize,
}

impl PatchMerger {
    pub fn new(cfg: &Qwen3VisionConfig, placement: MergerNorm, vb: VarBuilder) -> Result<Self> {
        let merged_dim = cfg.hidden_size * cfg.merge_unit();
        let norm_dim = if placement == MergerNorm::PerUnit { merged_dim } else { cfg.hidden_size };
        Ok(Self {
            norm: LayerNorm::new(norm_dim, NORM_EPS, vb.pp("norm"))?,
            linear_fc1: Linear::new(merged_dim, merged_dim, true, vb.pp("linear_fc1"))?,
            linear_fc2: Linear::new(merged_dim, cfg.out_hidden_size, true, vb.pp("linear_fc2"))?,
            placement,
            merged_dim,
        })
    }

    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        out.push((format!("{prefix}.linear_fc1"), &mut self.linear_fc1));
        out.push((format!("{prefix}.linear_fc2"), &mut self.linear_fc2));
    }

    /// `[N, hidden]` → `[N / 4, out_hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let units = xs.dim(0)? * xs.dim(1)? / self.merged_dim;
        let xs = match self.placement {
            MergerNorm::PerPatch => self.norm.forward(xs)?.reshape((units, self.merged_dim))?,
            MergerNorm::PerUnit => self.norm.forward(&xs.reshape((units, self.merged_dim))?)?,
        };
        self.linear_fc2.forward(&self.linear_fc1.forward(&xs)?.gelu_erf()?)
    }
}

/// What the tower gives the language model: merged features `[N / 4, out_hidden]` and one
/// DeepStack level per `deepstack_visual_indexes` entry, same shape.
#[derive(Debug, Clone)]
pub struct Qwen3VisionOutput {
    pub features: Tensor,
    pub deepstack: Vec<Tensor>,
}

/// Intermediate results of one tower pass, in the processor's patch order.
pub struct Qwen3VisionTrace {
    pub patch_embed: Tensor,
    pub pos_embed: Tensor,
    pub blocks: Vec<Tensor>,
    pub output: Qwen3VisionOutput,
}

/// What one tower pass computes beyond the merged tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Merged tokens and DeepStack levels.
    Features,
    /// Merged tokens only.
    MergedOnly,
    /// Features, the embeddings and every block's output.
    Traced,
}

#[derive(Debug, Clone)]
pub struct Qwen3VisionTower {
    patch_embed: PatchEmbed,
    pos_embed: PositionEmbedding,
    blocks: Vec<VisionBlock>,
    merger: PatchMerger,
    deepstack_merger_list: Vec<PatchMerger>,
    cfg: Qwen3VisionConfig,
}

impl Qwen3VisionTower {
    pub fn new(cfg: &Qwen3VisionConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = (0..cfg.depth).map(|i| VisionBlock::new(cfg, vb.pp(format!("blocks.{i}")))).collect::<Result<_>>()?;
        let deepstack = (0..cfg.deepstack_visual_indexes.len())
            .map(|i| PatchMerger::new(cfg, MergerNorm::PerUnit, vb.pp(format!("deepstack_merger_list.{i}"))))
            .collect::<Result<_>>()?;
        Ok(Self {
            patch_embed: PatchEmbed::new(cfg, vb.pp("patch_embed"))?,
            pos_embed: PositionEmbedding::new(cfg, vb.pp("pos_embed"))?,
            blocks,
            merger: PatchMerger::new(cfg, MergerNorm::PerPatch, vb.pp("merger"))?,
            deepstack_merger_list: deepstack,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &Qwen3VisionConfig {
        &self.cfg
    }

    pub fn dtype(&self) -> DType {
        self.patch_embed.proj.weight().dtype()
    }

    /// `pixel_values`: [Σ t·h·w, C·Tp·P·P] in the processor's order.
    pub fn forward(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> crate::Result<Qwen3VisionOutput> {
        Ok(self.run(pixel_values, grids, Pass::Features)?.output)
    }

    /// The merged tokens `[Σ t·h·w / 4, out_hidden]` only, the DeepStack mergers not run (what a
    /// motion encoder made of this tower yields).
    pub fn forward_merged(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> crate::Result<Tensor> {
        Ok(self.run(pixel_values, grids, Pass::MergedOnly)?.output.features)
    }

    /// Like [`forward`](Self::forward), also returning the embeddings and every block's output.
    pub fn forward_traced(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> crate::Result<Qwen3VisionTrace> {
        self.run(pixel_values, grids, Pass::Traced)
    }

    fn run(&self, pixel_values: &Tensor, grids: &[[usize; 3]], pass: Pass) -> crate::Result<Qwen3VisionTrace> {
        let patches = FramePatches::new(grids, self.cfg.spatial_merge_size)?;
        let expected = [patches.rot_pos_ids.len(), self.cfg.patch_dim()];
        if pixel_values.dims() != expected {
            return Err(ModelError::Pixels {
                problem: format!("pixel values have shape {:?}, the grids {grids:?} need {expected:?}", pixel_values.dims()),
            });
        }
        let device = pixel_values.device();
        let sizes: Vec<[usize; 2]> = grids.iter().flat_map(|&[t, h, w]| std::iter::repeat_n([h, w], t * h * w)).collect();
        let patch_embed = self.patch_embed.forward(pixel_values)?;
        let pos_embed = self.pos_embed.forward(&patches, &sizes)?;
        let mut xs = (&patch_embed + &pos_embed)?;
        let (cos, sin) = self.rotary(&patches, device)?;
        let frames = Segments::new(&patches.cu_seqlens, device)?;
        let mut blocks = Vec::new();
        let mut deepstack = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            xs = block.forward(&xs, &cos, &sin, &frames)?;
            if let Some(level) = self.cfg.deepstack_visual_indexes.iter().position(|&b| b == i)
                && pass != Pass::MergedOnly
            {
                deepstack.push(self.deepstack_merger_list[level].forward(&xs)?);
            }
            if pass == Pass::Traced {
                blocks.push(xs.clone());
            }
        }
        let output = Qwen3VisionOutput { features: self.merger.forward(&xs)?, deepstack };
        Ok(Qwen3VisionTrace { patch_embed, pos_embed, blocks, output })
    }

    fn rotary(&self, patches: &FramePatches, device: &Device) -> Result<(Tensor, Tensor)> {
        rotary_2d(self.cfg.head_dim(), self.cfg.rope_theta, patches.rot_pos_ids.iter().copied(), device)
    }
}

impl AdaptableTower for Qwen3VisionTower {
    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        for (i, block) in self.blocks.iter_mut().enumerate() {
            block.linears_mut(&format!("{prefix}.blocks.{i}"), out);
        }
        self.merger.linears_mut(&format!("{prefix}.merger"), out);
        for (i, merger) in self.deepstack_merger_list.iter_mut().enumerate() {
            merger.linears_mut(&format!("{prefix}.deepstack_merger_list.{i}"), out);
        }
    }
}
