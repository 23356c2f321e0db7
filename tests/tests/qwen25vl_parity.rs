//! Qwen2.5-VL in Candle against transformers' reference dumps (`tests/fixtures/qwen2_5_vl/*`),
//! in f32 on CPU. Every dump directory is checked, so a new dump needs no code.

use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use motionvl_models::qwen25vl::{causal_lm_loss, GenerateOptions, PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::{RopePositions, TokenKind};
use motionvl_models::vision::VisionLayout;
use motionvl_models::{CheckpointFiles, CheckpointWeights, Qwen25VlConfig};
use motionvl_tests::{assert_close, fixture_dirs, max_rel_diff, Tensors};

const LOGITS_TOL: f32 = 1e-4;

struct Fixture {
    dir: PathBuf,
    name: String,
    cfg: Qwen25VlConfig,
    inputs: Tensors,
    expected: Tensors,
}

impl Fixture {
    fn all() -> Vec<Fixture> {
        fixture_dirs("qwen2_5_vl").into_iter().map(|dir| Fixture::open(&dir).expect("fixture loads")).collect()
    }

    fn open(dir: &Path) -> Result<Self> {
        Ok(Self {
            dir: dir.to_path_buf(),
            name: dir.file_name().unwrap_or_default().to_string_lossy().into_owned(),
            cfg: Qwen25VlConfig::from_file(&dir.join("config.json"))?,
            inputs: Tensors::load(&dir.join("inputs.safetensors"))?,
            expected: Tensors::load(&dir.join("expected.safetensors"))?,
        })
    }

    fn model(&self) -> Qwen25Vl {
        Qwen25Vl::load(&CheckpointFiles::from_dir(&self.dir).expect("files"), DType::F32, &Device::Cpu).expect("model loads")
    }

    /// transformers 5 positions differ from the legacy ones for this dump; its logits and
    /// generations were made with transformers 5 positions.
    fn hf_positions_differ(&self) -> bool {
        self.expected.has("legacy.logits")
    }

    fn grid(&self, name: &str) -> Vec<[usize; 3]> {
        self.inputs
            .i64_rows(name)
            .expect("grid")
            .into_iter()
            .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
            .collect()
    }

    fn video(&self) -> PixelInput {
        PixelInput { pixel_values: self.inputs.get("pixel_values_videos").unwrap().clone(), grids: self.grid("video_grid_thw") }
    }

    fn image(&self) -> PixelInput {
        PixelInput { pixel_values: self.inputs.get("pixel_values").unwrap().clone(), grids: self.grid("image_grid_thw") }
    }

    fn seconds_per_grid(&self) -> Vec<f64> {
        let t = self.inputs.get("second_per_grid_ts").unwrap().to_dtype(DType::F64).unwrap();
        t.to_vec1().unwrap()
    }

    fn video_inputs(&self) -> VisionInputs {
        VisionInputs { images: None, videos: Some(self.video()), video_seconds_per_grid: self.seconds_per_grid() }
    }

    fn batch_inputs(&self) -> VisionInputs {
        VisionInputs { images: Some(self.image()), videos: Some(self.video()), video_seconds_per_grid: self.seconds_per_grid() }
    }

    /// A batch from `<prefix>input_ids`, `<prefix>attention_mask`, `<prefix>mm_token_type_ids`.
    fn prompt(&self, prefix: &str) -> PromptBatch {
        let ids = self.inputs.i64_rows(&format!("{prefix}input_ids")).unwrap();
        let mask = self.inputs.i64_rows(&format!("{prefix}attention_mask")).unwrap();
        let types = self.inputs.i64_rows(&format!("{prefix}mm_token_type_ids")).unwrap();
        PromptBatch {
            ids: ids.iter().map(|r| r.iter().map(|&t| t as u32).collect()).collect(),
            mask: mask.iter().map(|r| r.iter().map(|&m| m == 1).collect()).collect(),
            kinds: types.iter().map(|r| r.iter().map(|&t| TokenKind::from_id(t).unwrap()).collect()).collect(),
        }
    }

    /// transformers' own positions (`name`, [3, B, L], made for the `source` batch) moved onto the
    /// real tokens of `batch`, whose rows are prefixes of the source rows.
    fn hf_positions(&self, name: &str, source: &str, batch: &PromptBatch) -> RopePositions {
        let axes: Vec<Vec<Vec<i64>>> = self.expected.get(name).unwrap().to_dtype(DType::I64).unwrap().to_vec3().unwrap();
        let source_mask = self.inputs.i64_rows(&format!("{source}attention_mask")).unwrap();
        let positions: [Vec<Vec<i64>>; 3] = std::array::from_fn(|axis| {
            batch
                .mask
                .iter()
                .enumerate()
                .map(|(b, mask)| {
                    let mut real = (0..source_mask[b].len()).filter(|&i| source_mask[b][i] == 1).map(|i| axes[axis][b][i]);
                    mask.iter().map(|&m| if m { real.next().unwrap() } else { 1 }).collect()
                })
                .collect()
        });
        RopePositions::explicit(positions, &batch.mask)
    }

    /// The positions transformers used for this prompt: ours when they agree, else its own.
    fn reference_positions(&self, batch: &PromptBatch, source: &str) -> Option<RopePositions> {
        self.hf_positions_differ().then(|| self.hf_positions(&format!("{source}position_ids"), source, batch))
    }

    fn labels(&self) -> Vec<Vec<i64>> {
        self.inputs.i64_rows("labels").unwrap()
    }
}

#[test]
fn vision_layout_matches_reference() {
    for fx in Fixture::all() {
        let layout = VisionLayout::new(&fx.grid("video_grid_thw"), &fx.cfg.vision).unwrap();
        let as_usize = |name: &str| -> Vec<usize> { fx.expected.i64_flat(name).unwrap().into_iter().map(|v| v as usize).collect() };
        assert_eq!(layout.window_index, as_usize("vision.window_index"), "{}: window index", fx.name);
        assert_eq!(layout.cu_window_seqlens, as_usize("vision.cu_window_seqlens"), "{}: window lengths", fx.name);
        assert_eq!(layout.cu_seqlens, as_usize("vision.cu_seqlens"), "{}: frame lengths", fx.name);
        let rot: Vec<[usize; 2]> = fx.expected.i64_rows("vision.rot_pos_ids").unwrap().into_iter().map(|r| [r[0] as usize, r[1] as usize]).collect();
        assert_eq!(layout.rot_pos_ids, rot, "{}: rotary positions", fx.name);
    }
}

#[test]
fn vision_tower_matches_reference() {
    for fx in Fixture::all() {
        let model = fx.model();
        let video = fx.video();
        let trace = model.visual().forward_traced(&video.pixel_values, &video.grids).unwrap();
        assert_close(&format!("{}: patch embedding", fx.name), &trace.patch_embed, fx.expected.get("vision.patch_embed").unwrap(), LOGITS_TOL);
        for (i, block) in trace.blocks.iter().enumerate() {
            assert_close(&format!("{}: vision block {i}", fx.name), block, fx.expected.get(&format!("vision.block{i}")).unwrap(), LOGITS_TOL);
        }
        assert_close(&format!("{}: video features", fx.name), &trace.output, fx.expected.get("vision_out").unwrap(), LOGITS_TOL);
        let image = fx.image();
        let image_out = model.visual().forward(&image.pixel_values, &image.grids).unwrap();
        assert_close(&format!("{}: image features", fx.name), &image_out, fx.expected.get("image_vision_out").unwrap(), LOGITS_TOL);
    }
}

#[test]
fn positions_follow_the_legacy_algorithm() {
    for fx in Fixture::all() {
        let model = fx.model();
        let batch = fx.prompt("");
        let ours = model.positions(&batch, &fx.video_inputs()).unwrap();
        let (pos_name, delta_name) = if fx.expected.has("legacy.position_ids") {
            ("legacy.position_ids", "legacy.rope_deltas")
        } else {
            ("position_ids", "rope_deltas")
        };
        let reference: Vec<Vec<Vec<i64>>> = fx.expected.get(pos_name).unwrap().to_dtype(DType::I64).unwrap().to_vec3().unwrap();
        assert_eq!(ours.positions.to_vec(), reference, "{}: {pos_name}", fx.name);
        assert_eq!(ours.deltas, fx.expected.i64_flat(delta_name).unwrap(), "{}: {delta_name}", fx.name);

        // Left-padded batch: real positions agree with transformers whenever its algorithm agrees with the legacy one.
        if !fx.hf_positions_differ() {
            let batch = fx.prompt("batch.");
            let ours = model.positions(&batch, &fx.batch_inputs()).unwrap();
            let reference: Vec<Vec<Vec<i64>>> = fx.expected.get("batch.position_ids").unwrap().to_dtype(DType::I64).unwrap().to_vec3().unwrap();
            for axis in 0..3 {
                for (b, mask) in batch.mask.iter().enumerate() {
                    for (i, &real) in mask.iter().enumerate() {
                        if real {
                            assert_eq!(ours.positions[axis][b][i], reference[axis][b][i], "{}: batch position axis {axis} row {b} col {i}", fx.name);
                        }
                    }
                }
            }
            assert_eq!(ours.deltas, fx.expected.i64_flat("batch.rope_deltas").unwrap(), "{}: batch deltas", fx.name);
        }
    }
}

#[test]
fn logits_and_loss_match_reference() {
    for fx in Fixture::all() {
        let model = fx.model();
        let batch = fx.prompt("");
        let inputs = fx.video_inputs();
        let logits = model.forward(&batch, &inputs, None).unwrap();
        let reference = if fx.hf_positions_differ() { "legacy.logits" } else { "logits" };
        assert_close(&format!("{}: {reference}", fx.name), &logits, fx.expected.get(reference).unwrap(), LOGITS_TOL);

        // The same model with transformers 5's positions reproduces its logits and loss.
        let hf = fx.hf_positions("position_ids", "", &batch);
        let logits = model.forward(&batch, &inputs, Some(&hf)).unwrap();
        assert_close(&format!("{}: logits", fx.name), &logits, fx.expected.get("logits").unwrap(), LOGITS_TOL);
        let loss = causal_lm_loss(&logits, &fx.labels()).unwrap();
        assert_close(&format!("{}: loss", fx.name), &loss, fx.expected.get("loss").unwrap(), 1e-5);
    }
}

#[test]
fn both_config_layouts_give_the_same_model() {
    for fx in Fixture::all() {
        let hub = Qwen25VlConfig::from_file(&fx.dir.join("config.hub_style.json")).unwrap();
        assert_eq!(hub, fx.cfg, "{}: hub-style and nested configs", fx.name);
        let vb = CheckpointWeights::open(&[fx.dir.join("model.safetensors")]).unwrap().var_builder(DType::F32, &Device::Cpu);
        let model = Qwen25Vl::new(&hub, vb).unwrap();
        let batch = fx.prompt("");
        let hf = fx.hf_positions("position_ids", "", &batch);
        let logits = model.forward(&batch, &fx.video_inputs(), Some(&hf)).unwrap();
        assert_close(&format!("{}: logits from the hub-style config", fx.name), &logits, fx.expected.get("logits").unwrap(), LOGITS_TOL);
    }
}

#[test]
fn gradients_match_reference_with_and_without_checkpointing() {
    for (fx, checkpointing) in Fixture::all().into_iter().flat_map(|fx| {
        let fx = std::rc::Rc::new(fx);
        [(fx.clone(), false), (fx, true)]
    }) {
        let weights = CheckpointWeights::open(&[fx.dir.join("model.safetensors")]).unwrap();
        let (vb, vars) = weights.to_vars(DType::F32, &Device::Cpu).unwrap();
        let mut model = Qwen25Vl::new(&fx.cfg, vb).unwrap();
        let recomputed = checkpointing.then(|| model.enable_gradient_checkpointing());
        let batch = fx.prompt("");
        let hf = fx.hf_positions("position_ids", "", &batch);
        let logits = model.forward(&batch, &fx.video_inputs(), Some(&hf)).unwrap();
        let mut grads = causal_lm_loss(&logits, &fx.labels()).unwrap().backward().unwrap();
        if let Some(recomputed) = recomputed {
            recomputed.merge_into(&mut grads).unwrap();
        }
        let names: Vec<&String> = fx.expected.names().filter(|n| n.starts_with("grads.")).collect();
        assert!(!names.is_empty(), "{}: no reference gradients", fx.name);
        for name in names {
            let param = &name["grads.".len()..];
            let var = vars.get(param).unwrap_or_else(|| panic!("{}: no parameter {param}", fx.name));
            let grad = grads.get(var).unwrap_or_else(|| panic!("{}: no gradient reached {param}", fx.name));
            let rel = max_rel_diff(grad, fx.expected.get(name).unwrap()).unwrap();
            assert!(rel <= 1e-3, "{} (checkpointing {checkpointing}): gradient of {param}: relative error {rel:e}", fx.name);
        }
    }
}

#[test]
fn greedy_generation_matches_reference() {
    for fx in Fixture::all() {
        let model = fx.model();
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(&format!("{prefix}prompt_"));
            let positions = fx.reference_positions(&batch, prefix);
            let out = model.generate(&batch, &inputs, positions.as_ref(), &options).unwrap();
            let expected_ids = fx.expected.i64_rows(&format!("{prefix}generated_ids")).unwrap();
            for (b, row) in expected_ids.iter().enumerate() {
                let new: Vec<u32> = row[batch.len()..].iter().map(|&t| t as u32).collect();
                assert_eq!(out.tokens[b], new, "{}: {prefix}generated ids row {b}", fx.name);
            }
            let steps = Tensor::stack(&out.step_logits, 1).unwrap();
            assert_close(&format!("{}: {prefix}generated logits", fx.name), &steps, fx.expected.get(&format!("{prefix}generated_logits")).unwrap(), LOGITS_TOL);
        }
    }
}

#[test]
fn padded_batch_logits_match_reference() {
    for fx in Fixture::all() {
        let model = fx.model();
        let batch = fx.prompt("batch.");
        let inputs = fx.batch_inputs();
        let positions = fx.reference_positions(&batch, "batch.");
        let logits = model.forward(&batch, &inputs, positions.as_ref()).unwrap();
        // Logits at padding are undefined; the reference zeroes them.
        let keep: Vec<f32> = batch.mask.iter().flatten().map(|&m| if m { 1.0 } else { 0.0 }).collect();
        let keep = Tensor::from_vec(keep, (batch.rows(), batch.len(), 1), &Device::Cpu).unwrap();
        let logits = logits.broadcast_mul(&keep).unwrap();
        assert_close(&format!("{}: batch logits", fx.name), &logits, fx.expected.get("batch.logits").unwrap(), LOGITS_TOL);
    }
}
