//! The released-file reader against the official evaluator itself: every dump under
//! `tests/fixtures/sis_motion/` (made by tools/fixtures/sis_motion.py running the official
//! `motion/src/eval/eval.py` on a released-layout `SIS-Bench/`) must be read with no flag into
//! the same questions, the same media, the same left-out rows (`--min_frames 8`) and, under the
//! official frame plan, the same frames (indices, files and decoded pixels) and
//! `second_per_grid_ts`.

use std::collections::BTreeMap;

use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::QwenMedia;
use motionvl_data::manifest::{LeftOut, OFFICIAL_MIN_FRAMES, official_left_out, read_sisbench};
use motionvl_data::samples::{ReadOptions, RowProblem};
use motionvl_data::video::{DecodeOptions, FolderListing, FrameFolder};
use motionvl_tests::fixtures::dumps;
use serde_json::Value;

/// The reason the official generator writes for a row it leaves out (`left_out()` in
/// tools/fixtures/sis_motion.py, its words around the official resolver and frame counter).
fn official_reason(left_out: Option<LeftOut>) -> String {
    match left_out {
        None => "media not found".to_string(),
        Some(LeftOut::TooFewFrames { frames, min_frames }) => format!("{frames} frames < --min_frames {min_frames}"),
    }
}

#[test]
fn released_rows_media_frames_and_left_out_rows_equal_the_official_evaluator() {
    let media = QwenMedia { video_policy: FramePolicy::Official { max_frames: 32 }, ..QwenMedia::default() };
    let mut checked = 0;
    for dump in dumps("sis_motion") {
        let meta = dump.json("meta.json");
        let manifest = dump.path("SIS-Bench/SIS-Bench.jsonl");
        let out =
            read_sisbench(&manifest, &ReadOptions { skip_bad: true, ..ReadOptions::default() }).unwrap_or_else(|e| panic!("{}: {e}", dump.label));

        // Left out: rows whose media the resolver cannot find, and clips of 1–7 frames.
        let mut ours: BTreeMap<String, String> = BTreeMap::new();
        for skipped in &out.skipped {
            assert!(matches!(skipped.problem, RowProblem::MissingMedia(_)), "{}: {skipped}", dump.label);
            ours.insert(skipped.id.clone().unwrap_or_default(), official_reason(None));
        }
        let mut kept = Vec::new();
        for q in &out.items {
            match official_left_out(&q.videos[0], OFFICIAL_MIN_FRAMES).unwrap_or_else(|e| panic!("{}: {}: {e}", dump.label, q.id)) {
                Some(reason) => {
                    ours.insert(q.id.clone(), official_reason(Some(reason)));
                }
                None => kept.push(q),
            }
        }
        let theirs: BTreeMap<String, String> = dump
            .field::<Vec<Value>>("meta.json", &meta, "left_out")
            .iter()
            .map(|d| (dump.field("meta.json", d, "id"), dump.field("meta.json", d, "reason")))
            .collect();
        assert_eq!(ours, theirs, "{}: left-out rows", dump.label);

        let questions: BTreeMap<String, Value> = dump.field("meta.json", &meta, "questions");
        assert_eq!(
            kept.iter().map(|q| q.id.clone()).collect::<Vec<_>>(),
            questions.keys().cloned().collect::<Vec<_>>(),
            "{}: evaluated questions",
            dump.label
        );
        for q in kept {
            let what = format!("{}: {}", dump.label, q.id);
            let official = &questions[&q.id];
            let resolved: String = dump.field("meta.json", official, "media");
            assert_eq!(q.videos[0], dump.dir.join(&resolved), "{what}: media");

            let (plan, decoded) =
                media.source(&q.videos[0]).load(&media.video_policy, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
            let expected = dump.tensors(&format!("expected/{}.safetensors", q.id));
            let want: Vec<usize> = expected.i64_flat("frame_indices").into_iter().map(|i| i as usize).collect();
            let recorded: Vec<usize> = dump.field("meta.json", official, "frame_indices");
            assert_eq!(want, recorded, "{what}: the dump's two records of the frames");
            if q.videos[0].is_dir() {
                // A folder's frame_indices count in the numeric order of the names; compare the
                // files themselves, which the official code took from its `sorted()` listing.
                let folder = FrameFolder::open_listed(&q.videos[0], 1.0, FolderListing::Official).unwrap_or_else(|e| panic!("{what}: {e}"));
                let names: Vec<String> = plan
                    .indices
                    .iter()
                    .map(|&i| folder.files()[i].file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
                    .collect();
                let files: Vec<String> = dump.field("meta.json", official, "frame_files");
                assert_eq!(names, files, "{what}: frame files");
            } else {
                assert_eq!(plan.indices, want, "{what}: frame indices");
            }
            let reference =
                expected.get("frames_u8").flatten_all().and_then(|t| t.to_vec1::<u8>()).unwrap_or_else(|e| panic!("{what}: frames_u8: {e}"));
            let ours: Vec<u8> = decoded.frames.iter().copied().collect();
            assert_eq!(ours.len(), reference.len(), "{what}: frames_u8 size");
            // The same frames, pixel for pixel (these clips carry BT.601, which PyAV 13 assumes).
            let max = ours.iter().zip(&reference).map(|(a, b)| a.abs_diff(*b)).max().unwrap_or(0);
            assert_eq!(max, 0, "{what}: decoded frames differ from the official reader's by up to {max} levels");
            let seconds = expected.f64_flat("second_per_grid_ts");
            assert_eq!(seconds.len(), 1, "{what}: one video");
            assert!((plan.second_per_grid(2) - seconds[0]).abs() < 1e-12, "{what}: second_per_grid_ts {} vs {}", plan.second_per_grid(2), seconds[0]);
            checked += 1;
        }
    }
    assert!(checked > 0, "no question checked");
}
