//! UrbanVideo-Bench (`MCQ.parquet` exported to JSON): 16 question categories in four abilities,
//! options inside the question text (up to A–G).

use std::path::Path;

use motionvl_data::manifest::read_urbanvideo;
use motionvl_data::samples::{ReadOptions, ReadOutcome};

use super::{Bench, BenchNames, Column, items_from};
use crate::error::Result;
use crate::item::Item;

pub struct UrbanVideo;

const NAMES: BenchNames = BenchNames { name: "urbanvideo", aliases: &["urbanvideo-bench", "urbanvideobench"], title: "UrbanVideo-Bench" };

const COLUMNS: [(&str, &str, &str); 16] = [
    ("Trajectory Captioning", "TC", "recall"),
    ("Sequence Recall", "SeR", "recall"),
    ("Object Recall", "OR", "recall"),
    ("Scene Recall", "ScR", "recall"),
    ("Start/End Position", "SEP", "recall"),
    ("Proximity", "Prx", "perception"),
    ("Duration", "Dur", "perception"),
    ("Landmark Position", "LP", "perception"),
    ("Goal Detection", "GD", "perception"),
    ("Cognitive Map", "CM", "perception"),
    ("Causal", "Cau", "reasoning"),
    ("Counterfactual", "CF", "reasoning"),
    ("Association", "Asc", "reasoning"),
    ("Progress Evaluation", "PE", "navigation"),
    ("High-level Planning", "HP", "navigation"),
    ("Action Generation", "AG", "navigation"),
];

impl Bench for UrbanVideo {
    fn names(&self) -> &'static BenchNames {
        &NAMES
    }

    fn read(&self, manifest: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Item>> {
        Ok(items_from(read_urbanvideo(manifest, opts)?))
    }

    fn layout(&self) -> Vec<Column> {
        Column::without_levels(&COLUMNS)
    }
}

#[cfg(test)]
mod tests {
    use motionvl_data::manifest::UrbanVideoTask;

    use super::*;

    #[test]
    fn columns_follow_the_data_crate_taxonomy() {
        for (task, _, dimension) in COLUMNS {
            assert_eq!(UrbanVideoTask::from_name(task).map(|t| t.dimension().name()), Some(dimension), "{task}");
        }
    }
}
