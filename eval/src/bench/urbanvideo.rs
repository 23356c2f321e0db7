//! UrbanVideo-Bench (`MCQ.parquet` exported to JSON): 16 question categories in four abilities,
//! options inside the question text (up to A–G).

use motionvl_data::manifest::read_urbanvideo;

use super::{BenchNames, Column, TableBench, items_from};

const NAMES: BenchNames = BenchNames { name: "urbanvideo", aliases: &["urbanvideo-bench", "urbanvideobench"], title: "UrbanVideo-Bench" };

/// The benchmark: its names, its reader and the columns below.
pub static URBAN_VIDEO: TableBench = TableBench {
    names: &NAMES,
    read: |manifest, opts| Ok(items_from(read_urbanvideo(manifest, opts)?)),
    layout: || Column::without_levels(&COLUMNS),
};

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
