//! A Qwen2.5-VL or Qwen3-VL reference dump (`tests/fixtures/qwen2_5_vl/<name>/`,
//! `tests/fixtures/qwen3_vl/<name>/`) read into the models' input types, for the parity, LoRA and
//! loading tests.

use candle_core::{DType, Device};
use motionvl_models::CheckpointFiles;
use motionvl_models::qwen3vl::Qwen3Vl;
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::{RopePositions, TokenKind};

use crate::fixtures::{Dump, Tensors, dumps};

pub struct QwenDump {
    pub dump: Dump,
    pub inputs: Tensors,
    pub expected: Tensors,
}

impl QwenDump {
    pub const FAMILY: &'static str = "qwen2_5_vl";
    pub const QWEN3_FAMILY: &'static str = "qwen3_vl";

    /// Every Qwen2.5-VL dump.
    pub fn all() -> Vec<QwenDump> {
        dumps(Self::FAMILY).into_iter().map(QwenDump::open).collect()
    }

    /// Every Qwen3-VL dump.
    pub fn all_qwen3() -> Vec<QwenDump> {
        dumps(Self::QWEN3_FAMILY).into_iter().map(QwenDump::open).collect()
    }

    pub fn open(dump: Dump) -> Self {
        Self { inputs: dump.tensors("inputs.safetensors"), expected: dump.tensors("expected.safetensors"), dump }
    }

    pub fn model(&self) -> Qwen25Vl {
        let files = CheckpointFiles::from_dir(&self.dump.dir).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label));
        Qwen25Vl::load(&files, DType::F32, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label))
    }

    pub fn qwen3_model(&self) -> Qwen3Vl {
        let files = CheckpointFiles::from_dir(&self.dump.dir).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label));
        Qwen3Vl::load(&files, DType::F32, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label))
    }

    pub fn grid(&self, name: &str) -> Vec<[usize; 3]> {
        self.inputs.i64_rows(name).into_iter().map(|g| [g[0] as usize, g[1] as usize, g[2] as usize]).collect()
    }

    pub fn video(&self) -> PixelInput {
        PixelInput { pixel_values: self.inputs.get("pixel_values_videos").clone(), grids: self.grid("video_grid_thw") }
    }

    pub fn image(&self) -> PixelInput {
        PixelInput { pixel_values: self.inputs.get("pixel_values").clone(), grids: self.grid("image_grid_thw") }
    }

    pub fn video_inputs(&self) -> VisionInputs {
        // Qwen3-VL's dumps have no seconds per grid: its videos' time is in the prompt's text.
        let seconds = if self.inputs.has("second_per_grid_ts") { self.inputs.f64_flat("second_per_grid_ts") } else { Vec::new() };
        VisionInputs { images: None, videos: Some(self.video()), video_seconds_per_grid: seconds }
    }

    /// The batch's inputs: row 0 holds the video, row 1 the image.
    pub fn batch_inputs(&self) -> VisionInputs {
        VisionInputs { images: Some(self.image()), ..self.video_inputs() }
    }

    /// A batch from `<prefix>input_ids`, `<prefix>attention_mask`, `<prefix>mm_token_type_ids`.
    pub fn prompt(&self, prefix: &str) -> PromptBatch {
        let ids = self.inputs.i64_rows(&format!("{prefix}input_ids"));
        let mask = self.inputs.i64_rows(&format!("{prefix}attention_mask"));
        let types = self.inputs.i64_rows(&format!("{prefix}mm_token_type_ids"));
        let kind = |t: i64| TokenKind::from_id(t).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label));
        PromptBatch {
            ids: ids.iter().map(|r| r.iter().map(|&t| t as u32).collect()).collect(),
            mask: mask.iter().map(|r| r.iter().map(|&m| m == 1).collect()).collect(),
            kinds: types.iter().map(|r| r.iter().map(|&t| kind(t)).collect()).collect(),
        }
    }

    /// transformers' own positions for the `<source>` sequences (`<source>position_ids`,
    /// [3, B, L]) moved onto the real tokens of `batch`, whose rows are prefixes of the source
    /// rows (the prompts of the generation tests).
    pub fn hf_positions(&self, source: &str, batch: &PromptBatch) -> RopePositions {
        let axes = self.expected.i64_3d(&format!("{source}position_ids"));
        let source_mask = self.inputs.i64_rows(&format!("{source}attention_mask"));
        let positions: [Vec<Vec<i64>>; 3] = std::array::from_fn(|axis| {
            batch
                .mask
                .iter()
                .enumerate()
                .map(|(b, mask)| {
                    let mut real = (0..source_mask[b].len()).filter(|&i| source_mask[b][i] == 1).map(|i| axes[axis][b][i]);
                    mask.iter()
                        .map(|&m| if m { real.next().unwrap_or_else(|| panic!("{}: prompt longer than its sequence", self.dump.label)) } else { 1 })
                        .collect()
                })
                .collect()
        });
        RopePositions::explicit(positions, &batch.mask)
    }

    /// The positions transformers generated from `batch` with: the prompt's own (see
    /// [`Self::hf_positions`]), then token k of row b at `decode_start[b] + k` — recorded by the
    /// generator, since transformers does not continue at max(prompt positions) + 1.
    pub fn hf_generation_positions(&self, source: &str, batch: &PromptBatch, decode_start: Vec<i64>) -> RopePositions {
        assert_eq!(decode_start.len(), batch.rows(), "{}: one decode start per row", self.dump.label);
        RopePositions { next: decode_start, ..self.hf_positions(source, batch) }
    }

    /// Whether transformers 5's positions of the `<prefix>` sequences equal the legacy ones on
    /// every real token (padding differs by convention: 0 there, 1 in the legacy code).
    pub fn positions_agree(&self, prefix: &str) -> bool {
        let hf = self.expected.i64_3d(&format!("{prefix}position_ids"));
        let legacy = self.expected.i64_3d(&format!("{prefix}legacy.position_ids"));
        let mask = self.inputs.i64_rows(&format!("{prefix}attention_mask"));
        (0..3)
            .all(|axis| mask.iter().enumerate().all(|(b, row)| row.iter().enumerate().all(|(i, &m)| m == 0 || hf[axis][b][i] == legacy[axis][b][i])))
    }
}
