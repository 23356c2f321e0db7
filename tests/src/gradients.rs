//! One training-loss backward pass of a Qwen2.5-VL dump with LoRA (and, when asked, the motion
//! connector) on any device: what the gradient tests compare across checkpointing, dtypes and
//! devices.

use candle_core::{DType, Device, Tensor, Var};
use motionvl_models::CheckpointFiles;
use motionvl_models::lora::{DEFAULT_TARGETS, LoraConfig, LoraWeights};
use motionvl_models::motion::{Connector, MotionBranch, MotionTower, vision_features};
use motionvl_models::qwen25vl::{PixelInput, Qwen25Vl};
use motionvl_models::seeded;

use crate::fixtures::max_abs;
use crate::qwen_dump::QwenDump;

/// Which linear layers carry adapters.
#[derive(Debug, Clone, Copy)]
pub enum Targets {
    /// q/k/v/o: the official SIS-Motion recipe.
    Attention,
    /// All seven projections: the paper's recipe and motionvl's default.
    All,
    /// gate/up/down of the decoder and of the vision tower: the vision path trains too.
    MlpWithVision,
}

impl Targets {
    pub const ALL: [Targets; 3] = [Targets::Attention, Targets::All, Targets::MlpWithVision];

    /// Rank 4 adapters on these targets, with `dropout`.
    pub fn config(self, dropout: f32) -> LoraConfig {
        let names: &[&str] = match self {
            Targets::Attention => &["q_proj", "k_proj", "v_proj", "o_proj"],
            Targets::All => &DEFAULT_TARGETS,
            Targets::MlpWithVision => &["gate_proj", "up_proj", "down_proj"],
        };
        LoraConfig {
            rank: 4,
            alpha: 8.0,
            dropout,
            target_modules: names.iter().map(|s| s.to_string()).collect(),
            adapt_vision: matches!(self, Targets::MlpWithVision),
            use_rslora: false,
        }
    }
}

/// One backward pass's setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub targets: Targets,
    /// The motion connector trains too, fed pseudo-images of other values than the frames.
    pub motion: bool,
    pub dtype: DType,
    pub checkpointing: bool,
    /// LoRA dropout (0 where devices are compared: the CPU and CUDA draw different masks).
    pub dropout: f32,
}

/// Trained tensors by name and their gradients (f32, on `device`) after one training-loss
/// backward pass; an error names a trained tensor that got no gradient, or only zeros.
pub fn gradients(fx: &QwenDump, setting: Setting, device: &Device) -> anyhow::Result<Vec<(String, Tensor)>> {
    let files = CheckpointFiles::from_dir(&fx.dump.dir)?;
    let mut model = Qwen25Vl::load(&files, setting.dtype, device)?;
    let recomputed = setting.checkpointing.then(|| model.enable_gradient_checkpointing());
    let lora = LoraWeights::init(&model.linear_shapes(), &setting.targets.config(setting.dropout), 7, device)?;
    for (k, pair) in lora.modules.values().enumerate() {
        // B starts at zero, which would leave A's gradient exactly zero and hide whether it flows.
        pair.b.set(&seeded::randn(pair.b.dims(), 0.05, k as u64, &Device::Cpu)?.to_device(device)?)?;
    }
    lora.attach(model.linears_mut())?;
    lora.runtime().set_training(true);
    lora.runtime().set_dropout_seed(11);
    let mut trained = lora.named_vars();

    let on_device =
        |p: PixelInput| -> candle_core::Result<PixelInput> { Ok(PixelInput { pixel_values: p.pixel_values.to_device(device)?, grids: p.grids }) };
    let host = fx.video_inputs();
    let inputs = motionvl_models::qwen25vl::VisionInputs { videos: host.videos.map(on_device).transpose()?, ..host };
    let (branch, pseudo) = if setting.motion {
        let vars = Connector::init_vars(model.config().text.hidden_size, 3, device)?;
        for (k, (name, var)) in vars.iter().enumerate() {
            if name.starts_with("connector.fc2.") {
                // W₂ starts at zero too, and would hide W₁'s gradient.
                var.set(&seeded::randn(var.dims(), 0.05, 100 + k as u64, &Device::Cpu)?.to_device(device)?)?;
            }
        }
        let branch = MotionBranch::from_visual(MotionTower::qwen25(model.visual()), &vars)?;
        trained.extend(vars);
        let video = fx.video();
        let pixels = seeded::randn(video.pixel_values.dims(), 1.0, 999, &Device::Cpu)?.to_device(device)?;
        (Some(branch), Some(PixelInput { pixel_values: pixels, grids: video.grids }))
    } else {
        (None, None)
    };
    let batch = fx.prompt("");
    let features = vision_features(&model, branch.as_ref(), &inputs, pseudo.as_ref())?;
    let positions = model.positions(&batch, &inputs)?;
    let loss = model.training_loss(&batch, &features, &positions, &fx.inputs.i64_rows("labels"))?;
    let mut grads = loss.backward(1.0)?;
    if let Some(recomputed) = recomputed {
        recomputed.merge_into(&mut grads)?;
    }
    let what = |name: &str| format!("{} {setting:?}: {name}", fx.dump.label);
    trained
        .into_iter()
        .map(|(name, var): (String, Var)| {
            let grad = grads.get(var.as_tensor()).ok_or_else(|| anyhow::anyhow!("{}: no gradient reached it", what(&name)))?;
            anyhow::ensure!(max_abs(grad) > 0.0, "{}: zero gradient", what(&name));
            Ok((name, grad.to_dtype(DType::F32)?))
        })
        .collect()
}
