//! LinkS²Bench-style manifests (SPEC §5; the row schema is the data crate's): 12 tasks in four
//! dimensions, answered by letter, yes/no, number (scored by MRA) or timestamp (ACC@1s). The
//! UAV video comes before the satellite image in the prompt.

use motionvl_data::manifest::read_links2bench;

use super::{BenchNames, Column, TableBench, items_from};

const NAMES: BenchNames = BenchNames { name: "links2", aliases: &["links2bench", "links²bench"], title: "LinkS²Bench" };

/// The benchmark: its names, its reader and the columns below.
pub static LINKS2_BENCH: TableBench = TableBench {
    names: &NAMES,
    read: |manifest, opts| Ok(items_from(read_links2bench(manifest, opts)?)),
    layout: || Column::without_levels(&COLUMNS),
};

const COLUMNS: [(&str, &str, &str); 12] = [
    ("Target Visibility", "TV", "perception"),
    ("Scene Association", "SA", "perception"),
    ("Zone Counting", "ZC", "perception"),
    ("Event Geo-localization", "EG", "localization"),
    ("Trajectory Matching", "TM", "localization"),
    ("Temporal Grounding", "TG", "localization"),
    ("Relative Distance", "RDs", "relation"),
    ("Relative Direction", "RDr", "relation"),
    ("Occlusion Attribution", "OA", "relation"),
    ("Spatiotemporal Ordering", "SO", "reasoning"),
    ("Region Interaction", "RI", "reasoning"),
    ("Region Reachability", "RR", "reasoning"),
];

#[cfg(test)]
mod tests {
    use motionvl_data::manifest::LinkS2Task;

    use super::*;

    #[test]
    fn columns_follow_the_data_crate_taxonomy() {
        for (task, _, dimension) in COLUMNS {
            assert_eq!(LinkS2Task::from_name(task).map(|t| t.dimension().name()), Some(dimension), "{task}");
        }
    }
}
