//! SIS-Bench: 13 four-option tasks over UAV video, two dimensions × three levels.

use motionvl_data::manifest::read_sisbench;

use super::{BenchNames, Column, TableBench, items_from};

const NAMES: BenchNames = BenchNames { name: "sisbench", aliases: &["sis", "sis-bench"], title: "SIS-Bench" };

/// The benchmark: its names, its reader and the columns below.
pub static SIS_BENCH: TableBench = TableBench {
    names: &NAMES,
    read: |manifest, opts| Ok(items_from(read_sisbench(manifest, opts)?)),
    layout: || COLUMNS.iter().map(|&(task, short, dimension, level)| Column { task, short, dimension, level: Some(level) }).collect(),
};

/// The paper's Table 2 order: spatial (perception, memory, reasoning), then self.
const COLUMNS: [(&str, &str, &str, &str); 13] = [
    ("Object Existence", "OE", "spatial", "perception"),
    ("Object Attribute", "OA", "spatial", "perception"),
    ("Relative Direction", "RD", "spatial", "perception"),
    ("Landmark Order", "LO", "spatial", "memory"),
    ("Landmark Recall", "LR", "spatial", "memory"),
    ("Positional Relationship", "PR", "spatial", "memory"),
    ("Spatial Consistency", "SC", "spatial", "reasoning"),
    ("Spatio-temporal Consistency", "STC", "spatial", "reasoning"),
    ("Action Recognition", "ARg", "self", "perception"),
    ("Action Sequence", "AS", "self", "memory"),
    ("Action Recall", "ARc", "self", "memory"),
    ("Action Prediction", "AP", "self", "reasoning"),
    ("Path Planning", "PP", "self", "reasoning"),
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use motionvl_data::manifest::SisTask;

    use super::*;

    /// Released SIS-Bench rows are SIS-Bench; rows of motionvl's navigation MCQ, whose task the
    /// SIS-Bench reader would keep as unlisted, stay the navigation benchmark's.
    #[test]
    fn detection_prefers_the_reader_that_knows_every_task() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, task: &str| {
            let path = dir.path().join(name);
            let row = serde_json::json!({"question_id": "q1", "video_name": "a.mp4", "task_type": task, "question": "Q",
                                          "options": {"A": "x", "B": "y"}, "answer": "A"});
            std::fs::write(&path, format!("{row}\n")).unwrap_or_else(|e| panic!("{e}"));
            path
        };
        let detected = |path: &Path| super::super::detect(path).map(|b| b.name()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detected(&write("sis.jsonl", "landmark_appearance_order")), "sisbench");
        assert_eq!(detected(&write("nav.jsonl", "Navigation MCQ")), "nav");
    }

    #[test]
    fn columns_follow_the_data_crate_taxonomy() {
        for (task, _, dimension, level) in COLUMNS {
            let t = SisTask::from_name(task).map(|t| (t.dimension().name(), t.level().name()));
            assert_eq!(t, Some((dimension, level)), "{task}");
        }
    }
}
