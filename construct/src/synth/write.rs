//! Files of the synthetic world: clips as MP4, ground truth as safetensors, questions as a
//! SIS-Bench manifest and as training conversations, and JSON descriptions.
//!
//! Ground-truth files (`<clip>.safetensors`, beside `<clip>.mp4`), N frames of H×W:
//!
//! | tensor | dtype | shape | meaning |
//! |---|---|---|---|
//! | `flow` | f32 | [N−1, 2, H, W] | forward flow t→t+1 in pixels; channel 0 = x (u), 1 = y (v) |
//! | `valid` | u8 | [N−1, H, W] | 1 where the flow is observable (in view, not occluded in t+1) |
//! | `depth` | f32 | [N, H, W] | z-depth in metres; 0 where the ray meets sky |
//! | `camera_to_world` | f32 | [N, 3, 4] | `[right | down | forward | position]` per frame |
//! | `intrinsics` | f32 | \[4\] | fx, fy, cx, cy in pixels (pixel centres at integer indices) |
//!
//! The header holds one metadata entry, `clip`, a JSON object with the clip id, behaviour,
//! fps and size (one entry only: safetensors writes metadata from a hash map, so more than
//! one would make the bytes depend on hash order).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use motionvl_data::manifest::ChoiceAnswer;
use motionvl_data::text::VIDEO_TAG;
use motionvl_data::video::{EncodeSettings, VideoError, VideoWriter};
use ndarray::ArrayView3;
use safetensors::{Dtype, tensor::TensorView};
use serde::Serialize;

use super::SynthError;
use super::camera::Intrinsics;
use super::qa::Mcq;
use super::render::RenderedClip;

/// Encodes RGB frames (`[H, W, 3]` each) as an H.264 MP4 at `fps`.
pub fn write_video<'a>(path: &Path, frames: impl IntoIterator<Item = &'a [u8]>, width: usize, height: usize, fps: u32) -> Result<(), SynthError> {
    let fps = i32::try_from(fps).map_err(|_| SynthError::Setting { key: "--fps", problem: format!("{fps} is too large") })?;
    let settings = EncodeSettings {
        frame_rate: (fps, 1),
        // About 2 bits per pixel per second: visually lossless at these sizes, so estimated
        // flow on the decoded video is not limited by compression.
        bit_rate: (width * height * fps as usize * 2).max(200_000),
        gop_size: fps as u32,
        options: vec![("preset".to_string(), "veryfast".to_string())],
        ..EncodeSettings::default()
    };
    let mut writer = VideoWriter::create(path, width, height, &settings)?;
    for rgb in frames {
        let view = ArrayView3::from_shape((height, width, 3), rgb).map_err(|e| VideoError::Encode {
            path: path.to_path_buf(),
            detail: format!("frame of {} bytes is not {width}x{height} RGB: {e}", rgb.len()),
        })?;
        writer.push(view)?;
    }
    Ok(writer.finish()?)
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// Writes a clip's exact flow, mask, depth and cameras (see the module docs).
pub fn write_ground_truth(path: &Path, clip: &RenderedClip, k: &Intrinsics, metadata: String) -> Result<(), SynthError> {
    let (w, h) = (k.width, k.height);
    let n = clip.frames.len();
    let err = |source| SynthError::GroundTruth { path: path.to_path_buf(), source };
    let flow = f32_bytes(clip.flows.iter().flat_map(|f| f.uv.iter().copied()));
    let valid: Vec<u8> = clip.flows.iter().flat_map(|f| f.valid.iter().copied()).collect();
    let depth = f32_bytes(clip.frames.iter().flat_map(|f| f.depth.iter().copied()));
    let cams = f32_bytes(clip.poses.iter().flat_map(|p| p.camera_to_world()));
    let intr = f32_bytes(k.to_array());
    let tensors = vec![
        ("flow", TensorView::new(Dtype::F32, vec![n - 1, 2, h, w], &flow).map_err(err)?),
        ("valid", TensorView::new(Dtype::U8, vec![n - 1, h, w], &valid).map_err(err)?),
        ("depth", TensorView::new(Dtype::F32, vec![n, h, w], &depth).map_err(err)?),
        ("camera_to_world", TensorView::new(Dtype::F32, vec![n, 3, 4], &cams).map_err(err)?),
        ("intrinsics", TensorView::new(Dtype::F32, vec![4], &intr).map_err(err)?),
    ];
    let meta = HashMap::from([("clip".to_string(), metadata)]);
    safetensors::serialize_to_file(tensors, Some(meta), path).map_err(err)?;
    motionvl_util::files::apply_default_mode(path).map_err(|e| err(safetensors::SafeTensorError::IoError(e)))
}

/// Writes `value` as pretty JSON with a final newline.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), SynthError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|source| SynthError::Json { path: path.to_path_buf(), source })?;
    text.push('\n');
    let mut file = fs::File::create(path).map_err(SynthError::io(path))?;
    file.write_all(text.as_bytes()).map_err(SynthError::io(path))
}

pub use crate::sisbench_qa::SisRow;

/// One turn of a LLaVA conversation.
#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    pub from: &'static str,
    pub value: String,
}

/// A LLaVA-form training row (what `samples::read_training_samples` reads).
#[derive(Debug, Clone, Serialize)]
pub struct ConversationRow {
    pub id: String,
    pub video: String,
    pub conversations: Vec<Turn>,
    pub task: String,
    pub format: &'static str,
}

/// How a training conversation answers a multiple-choice question.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerForm {
    /// The option's letter.
    #[default]
    Letter,
    /// The option's text ("pink silo"): what a model that names what it sees answers; the
    /// scorer reads the choice from the text (`option_text` rule).
    Text,
}

impl AnswerForm {
    /// What the prompt asks for: the form the conversation answers in.
    pub fn asked(self) -> ChoiceAnswer {
        match self {
            AnswerForm::Letter => ChoiceAnswer::Letter,
            AnswerForm::Text => ChoiceAnswer::Text,
        }
    }
}

impl ConversationRow {
    /// The conversation asking `q` for an answer in `form` and answering in it.
    pub fn new(q: &Mcq, form: AnswerForm) -> Self {
        let answer = match form {
            AnswerForm::Letter => q.answer_letter().to_string(),
            AnswerForm::Text => q.options[q.answer].clone(),
        };
        ConversationRow {
            id: q.id.clone(),
            video: q.video.clone(),
            conversations: vec![
                Turn { from: "human", value: format!("{VIDEO_TAG}\n{}", q.prompt(form.asked())) },
                Turn { from: "gpt", value: answer },
            ],
            task: q.task.name().to_string(),
            format: "mcq",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use motionvl_data::manifest::SisTask;

    #[test]
    fn a_conversation_asks_for_the_form_it_answers_in() {
        let q = Mcq {
            id: "w0-ar-3".into(),
            task: SisTask::ActionRecognition,
            video: "videos/w0-c3.mp4".into(),
            concat_num: 1,
            question: "Which movement does the drone make?".into(),
            options: ["forward", "backward", "yaw_left", "yaw_right"].map(String::from),
            answer: 2,
        };
        let head = "<video>\nWhich movement does the drone make?\nOptions:\nA. forward\nB. backward\nC. yaw_left\nD. yaw_right\n";
        for (form, instruction, answer) in [
            (AnswerForm::Letter, "Answer with the option's letter from the given choices directly.", "C"),
            (AnswerForm::Text, "Answer with the option's text from the given choices directly.", "yaw_left"),
        ] {
            let row = ConversationRow::new(&q, form);
            assert_eq!(row.conversations[0].value, format!("{head}{instruction}"), "{form:?}");
            assert_eq!(row.conversations[1].value, answer, "{form:?}");
        }
    }
}
