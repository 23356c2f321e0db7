//! Decoding real videos that the tests encode themselves with `VideoWriter` (ffmpeg-next), so
//! CI needs the FFmpeg libraries but no media files or CLI.
//!
//! Every synthetic frame carries its own index as an 8-bit code (eight 16×16 black/white
//! blocks along the top) and four colour bars (red, green, blue, white) below, so a test can
//! tell exactly which frame the decoder returned and whether colours survived.

use std::path::{Path, PathBuf};

use motionvl_data::frames::{ClipTiming, EvalProtocol, FramePlan, FramePolicy, TrainingPlan, eval_plan, uniform_plan};
use motionvl_data::loader::QwenMedia;
use motionvl_data::sampling::Sampling;
use motionvl_data::video::{
    DecodeOptions, EncodeSettings, FolderListing, FrameFolder, VideoError, VideoSource, VideoWriter, decode_all, decode_video, load_image,
    probe_video,
};
use ndarray::{ArrayView3, s};

mod common;
use common::{BARS, H, W, codes, frame_code, mpeg4, synthetic_frame, write_clip, write_png_sequence};

/// Colour bars must come back within `tol` levels (lossy codecs, 4:2:0 chroma).
fn assert_bars(frame: ArrayView3<u8>, tol: i32, what: &str) {
    for (i, bar) in BARS.iter().enumerate() {
        let px = frame.slice(s![48, i * 32 + 16, ..]);
        for c in 0..3 {
            let d = (i32::from(px[c]) - i32::from(bar[c])).abs();
            assert!(d <= tol, "{what}: bar {i} channel {c} is {} not {} (tolerance {tol})", px[c], bar[c]);
        }
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn mp4_probe_and_full_decode() {
    let dir = tmp();
    let path = dir.path().join("clip.mp4");
    write_clip(&path, 45, &mpeg4((30, 1), 12));

    let info = probe_video(&path).expect("probe");
    assert_eq!((info.width, info.height, info.frame_count), (W, H, 45));
    assert!((info.fps - 30.0).abs() < 1e-9, "fps {}", info.fps);
    assert!((info.duration_s - 1.5).abs() < 0.05, "duration {}", info.duration_s);

    let all = decode_all(&path).expect("decode");
    assert_eq!(all.frames.dim(), (45, H, W, 3));
    assert_eq!(codes(&all.frames), (0..45).collect::<Vec<_>>());
    for (i, t) in all.timestamps.iter().enumerate() {
        assert!((t - i as f64 / 30.0).abs() < 1e-6, "frame {i} at {t}");
    }
    assert_bars(all.frames.slice(s![20, .., .., ..]), 40, "mp4 frame 20");
    assert_eq!(all.frames_decoded, 45);
}

#[test]
fn plan_decoding_picks_nearest_frames_in_plan_order() {
    let dir = tmp();
    let path = dir.path().join("clip.mp4");
    write_clip(&path, 45, &mpeg4((30, 1), 12));
    let info = probe_video(&path).expect("probe");

    // 1.5 s under the evaluation protocol: 2 FPS -> t = 0, 0.5, 1.0 -> frames 0, 15, 30.
    let plan = eval_plan(info.timing(), &EvalProtocol::default()).expect("plan");
    assert_eq!(plan.indices, vec![0, 15, 30]);
    let got = decode_video(&path, &plan).expect("decode");
    assert_eq!(codes(&got.frames), vec![0, 15, 30]);
    assert!((got.timestamps[1] - 0.5).abs() < 1e-6);

    // Unsorted targets keep their order; past-the-end targets get the last frame; a target
    // between two frames gets the nearer one (0.51 s -> frame 15 at 0.5 s, not 16 at 0.533).
    let plan = FramePlan { indices: vec![15, 0, 44, 44], timestamps: vec![0.51, 0.0, 1.49, 9.0], fps: 2.0 };
    let got = decode_video(&path, &plan).expect("decode");
    assert_eq!(codes(&got.frames), vec![15, 0, 44, 44]);
}

#[test]
fn long_clip_seeks_instead_of_decoding_everything() {
    let dir = tmp();
    for ext in ["mp4", "mkv", "avi"] {
        let path = dir.path().join(format!("long.{ext}"));
        // 30 s at 10 FPS, a keyframe every second.
        write_clip(&path, 300, &mpeg4((10, 1), 10));
        let info = probe_video(&path).expect("probe");
        assert_eq!(info.frame_count, 300, "{ext}");

        let plan = uniform_plan(info.timing(), 4).expect("plan");
        assert_eq!(plan.indices, vec![0, 100, 199, 299]);
        // Codes are 8 bits: frame 299 reads 299 % 256.
        let want: Vec<usize> = plan.indices.iter().map(|i| i % 256).collect();
        let got = decode_video(&path, &plan).expect("decode");
        assert_eq!(codes(&got.frames), want, "{ext}");
        assert!(got.frames_decoded < 60, "{ext}: decoded {} of 300 frames for a 4-frame plan", got.frames_decoded);

        // Seeking off (gap larger than the clip) decodes through and returns the same frames.
        let opts = DecodeOptions { seek_min_gap_s: 1e9, ..DecodeOptions::default() };
        let through = VideoSource::File(path.clone()).decode(&plan, &opts).expect("decode");
        assert_eq!(codes(&through.frames), want, "{ext}");
        assert!(through.frames_decoded >= 299, "{ext}");
    }
}

#[test]
fn empty_plan_is_an_error() {
    let dir = tmp();
    let path = dir.path().join("clip.mp4");
    write_clip(&path, 4, &mpeg4((10, 1), 4));
    let plan = FramePlan { indices: vec![], timestamps: vec![], fps: 1.0 };
    let err = decode_video(&path, &plan).expect_err("empty plan");
    assert!(matches!(err, VideoError::Plan { .. }) && err.to_string().contains("clip.mp4"), "{err}");
}

#[test]
fn variable_frame_rate_uses_timestamps() {
    let dir = tmp();
    let path = dir.path().join("vfr.mkv");
    let times_ms = [0i64, 40, 80, 300, 320, 700, 1500, 1530, 2000];
    let settings = EncodeSettings { time_base: Some((1, 1000)), ..mpeg4((10, 1), 4) };
    let mut writer = VideoWriter::create(&path, W, H, &settings).expect("writer");
    for (i, ms) in times_ms.iter().enumerate() {
        writer.push_at(synthetic_frame(i).view(), *ms as f64 / 1000.0).expect("push");
    }
    writer.finish().expect("finish");

    let all = decode_all(&path).expect("decode");
    assert_eq!(codes(&all.frames), (0..times_ms.len()).collect::<Vec<_>>());
    for (t, ms) in all.timestamps.iter().zip(times_ms) {
        assert!((t - ms as f64 / 1000.0).abs() < 1e-6, "{t} vs {ms} ms");
    }

    // Nearest by time, not by index: 0.29 s -> 300 ms (frame 3); 1.0 s -> 700 ms (frame 5,
    // 0.3 s away, vs 1500 ms 0.5 s away); 1.9 s -> 2000 ms (frame 8).
    let plan = FramePlan { indices: vec![0; 4], timestamps: vec![0.29, 0.7, 1.0, 1.9], fps: 1.0 };
    let got = decode_video(&path, &plan).expect("decode");
    assert_eq!(codes(&got.frames), vec![3, 5, 5, 8]);
    for (t, want) in got.timestamps.iter().zip([0.3, 0.7, 0.7, 2.0]) {
        assert!((t - want).abs() < 1e-9, "{t} vs {want}");
    }
}

#[test]
fn non_integer_frame_rate() {
    let dir = tmp();
    let path = dir.path().join("ntsc.mp4");
    write_clip(&path, 30, &mpeg4((30000, 1001), 15));
    let info = probe_video(&path).expect("probe");
    assert!((info.fps - 30000.0 / 1001.0).abs() < 1e-6, "fps {}", info.fps);
    assert_eq!(info.frame_count, 30);
    let all = decode_all(&path).expect("decode");
    assert_eq!(codes(&all.frames), (0..30).collect::<Vec<_>>());
    for (i, t) in all.timestamps.iter().enumerate() {
        assert!((t - i as f64 * 1001.0 / 30000.0).abs() < 1e-4, "frame {i} at {t}");
    }
    // The rate-exact plan sees the real rate: 1.001 s at 2 FPS -> 3 frames (t = 0, 0.5, 1.0).
    let rate_exact = EvalProtocol { sampling: Sampling::RateExact, ..EvalProtocol::default() };
    let (plan, got) = VideoSource::File(path.clone()).load(&FramePolicy::SisbenchEval(rate_exact), &DecodeOptions::default()).expect("load");
    assert_eq!(plan.len(), 3);
    assert_eq!(codes(&got.frames), vec![0, 15, 29]);
    // qwen-vl-utils raises the 2 frames at 2 FPS to its 4-frame minimum, spread over the clip.
    let (plan, got) = VideoSource::File(path).load(&FramePolicy::SisbenchEval(EvalProtocol::default()), &DecodeOptions::default()).expect("load");
    assert_eq!(plan.indices, [0, 10, 19, 29]);
    assert_eq!(codes(&got.frames), vec![0, 10, 19, 29]);
}

#[test]
fn other_containers() {
    let dir = tmp();
    let mut cases: Vec<(&str, Option<&str>)> = vec![("avi", Some("mpeg4")), ("mkv", Some("mpeg4"))];
    // WebM needs a VP8/VP9 encoder; most FFmpeg builds have libvpx, but skip cleanly if not.
    let has_vpx = ffmpeg_next::encoder::find_by_name("libvpx-vp9").is_some() || ffmpeg_next::encoder::find_by_name("libvpx").is_some();
    if has_vpx {
        cases.push(("webm", None));
    } else {
        eprintln!("skipping webm: this FFmpeg build has no libvpx encoder");
    }
    if ffmpeg_next::encoder::find_by_name("libx264").is_some() {
        cases.push(("mp4", Some("libx264")));
    }
    for (ext, codec) in cases {
        let path = dir.path().join(format!("clip.{ext}"));
        let settings = EncodeSettings { codec: codec.map(str::to_string), ..mpeg4((15, 1), 5) };
        write_clip(&path, 12, &settings);
        let info = probe_video(&path).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(info.frame_count, 12, "{ext}: frame count");
        let all = decode_all(&path).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(codes(&all.frames), (0..12).collect::<Vec<_>>(), "{ext}: frame codes");
        assert_bars(all.frames.slice(s![6, .., .., ..]), 48, ext);
        let plan = uniform_plan(info.timing(), 3).expect("plan");
        let got = decode_video(&path, &plan).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(codes(&got.frames), vec![0, 6, 11], "{ext}: planned codes");
    }
}

#[test]
fn frame_folder_is_a_video() {
    let dir = tmp();
    // Unpadded numbers: lexical order would put 10 before 2.
    let names: Vec<String> = (1..=12).map(|i| format!("{i}.png")).collect();
    write_png_sequence(dir.path(), &names);
    std::fs::write(dir.path().join("notes.txt"), "not a frame").expect("write");

    let folder = FrameFolder::open(dir.path(), 10.0).expect("open");
    assert_eq!(folder.files().len(), 12);
    assert!(folder.files()[1].ends_with("2.png"));
    let info = folder.info().expect("info");
    assert_eq!((info.width, info.height, info.frame_count), (W, H, 12));
    assert!((info.duration_s - 1.2).abs() < 1e-9);

    let source = VideoSource::FrameFolder { dir: dir.path().to_path_buf(), fps: 10.0, listing: FolderListing::Numeric };
    let (plan, got) = source.load(&FramePolicy::Uniform { frames: 4 }, &DecodeOptions::default()).expect("load");
    assert_eq!(plan.indices, vec![0, 4, 7, 11]);
    assert_eq!(codes(&got.frames), vec![0, 4, 7, 11]);
    assert_eq!(got.timestamps, vec![0.0, 0.4, 0.7, 1.1]);
    assert_eq!(got.frames_decoded, 4);
    // PNG is lossless: pixels come back exactly.
    assert_eq!(got.frames.slice(s![1, .., .., ..]), synthetic_frame(4));

    // A plan repeating a frame reads it once.
    let repeat = uniform_plan(ClipTiming::new(1, 10.0), 2).expect("plan");
    assert_eq!(folder.decode(&repeat).expect("decode").frames_decoded, 1);
}

#[test]
fn frame_folder_errors_name_the_file() {
    let dir = tmp();
    assert!(matches!(FrameFolder::open(dir.path(), 10.0), Err(VideoError::EmptyFolder { .. })));
    assert!(matches!(FrameFolder::open(dir.path(), 0.0), Err(VideoError::BadFps { .. })));
    let missing = dir.path().join("nope");
    let err = FrameFolder::open(&missing, 10.0).expect_err("missing folder");
    assert!(err.to_string().contains("nope"), "{err}");

    let names: Vec<String> = (1..=3).map(|i| format!("{i:07}.png")).collect();
    write_png_sequence(dir.path(), &names);
    // Frame 3 has another size.
    image::RgbImage::new(32, 16).save(dir.path().join(&names[2])).expect("save");
    let folder = FrameFolder::open(dir.path(), 5.0).expect("open");
    let plan = uniform_plan(ClipTiming::new(3, 5.0), 3).expect("plan");
    let err = folder.decode(&plan).expect_err("size mismatch");
    assert!(matches!(err, VideoError::FrameSize { .. }), "{err}");
    assert!(err.to_string().contains("0000003.png"), "{err}");

    let plan = FramePlan { indices: vec![7], timestamps: vec![1.4], fps: 5.0 };
    assert!(matches!(folder.decode(&plan), Err(VideoError::PlanOutOfRange { index: 7, frame_count: 3, .. })));
}

#[test]
fn images_load_as_rgb() {
    let dir = tmp();
    let frame = synthetic_frame(0b1010_0101);
    let img = image::RgbImage::from_raw(W as u32, H as u32, frame.clone().into_raw_vec_and_offset().0).expect("image");
    for ext in ["png", "webp", "jpg"] {
        let path = dir.path().join(format!("still.{ext}"));
        img.save(&path).unwrap_or_else(|e| panic!("save {ext}: {e}"));
        let loaded = load_image(&path).unwrap_or_else(|e| panic!("{ext}: {e}"));
        assert_eq!(loaded.dim(), (H, W, 3), "{ext}");
        assert_eq!(frame_code(loaded.view()), 0b1010_0101, "{ext}");
        if ext == "jpg" {
            assert_bars(loaded.view(), 40, ext);
        } else {
            assert_eq!(loaded, frame, "{ext} is lossless");
        }
    }
    // Greyscale with alpha is expanded to RGB.
    let path = dir.path().join("grey.png");
    image::GrayAlphaImage::from_pixel(4, 2, image::LumaA([77, 10])).save(&path).expect("save");
    let loaded = load_image(&path).expect("grey");
    assert_eq!(loaded.dim(), (2, 4, 3));
    assert!(loaded.iter().all(|v| *v == 77));
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_file() {
    let dir = tmp();
    let missing = dir.path().join("missing.mp4");
    let err = decode_all(&missing).expect_err("missing");
    assert!(matches!(err, VideoError::Open { .. }), "{err}");
    assert!(err.to_string().contains("missing.mp4"), "{err}");

    let junk: PathBuf = dir.path().join("junk.mp4");
    std::fs::write(&junk, b"this is not a video at all").expect("write");
    let err = probe_video(&junk).expect_err("junk");
    assert!(err.to_string().contains("junk.mp4"), "{err}");

    let err = load_image(&dir.path().join("none.png")).expect_err("missing image");
    assert!(matches!(err, VideoError::Image { .. }) && err.to_string().contains("none.png"), "{err}");

    let err = VideoWriter::create(&dir.path().join("odd.mp4"), 31, 16, &EncodeSettings::default()).err().expect("odd width");
    assert!(matches!(err, VideoError::Encode { .. }) && err.to_string().contains("odd.mp4"), "{err}");
}

/// An MP4 whose index (written first) declares 20 frames but whose data was cut after a few:
/// what a full disk or an interrupted copy leaves.
fn truncated_mp4(path: &Path) {
    let settings = EncodeSettings { muxer_options: vec![("movflags".into(), "+faststart".into())], gop_size: 1, ..mpeg4((10, 1), 1) };
    write_clip(path, 20, &settings);
    let bytes = std::fs::read(path).expect("read");
    std::fs::write(path, &bytes[..bytes.len() * 3 / 10]).expect("cut");
}

#[test]
fn a_truncated_video_is_an_error_naming_both_frame_counts() {
    let dir = tmp();
    let path = dir.path().join("cut.mp4");
    truncated_mp4(&path);
    let info = probe_video(&path).expect("the index still reads");
    assert_eq!(info.frame_count, 20);
    let plan = FramePolicy::Uniform { frames: 8 }.plan(info.timing()).expect("plan");
    let err = decode_video(&path, &plan).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("cut.mp4") && err.contains("damaged or truncated") && err.contains("frame 20"), "{err}");
}

#[test]
fn a_clip_shorter_than_min_frames_is_an_error() {
    let dir = tmp();
    let path = dir.path().join("one.mp4");
    write_clip(&path, 1, &mpeg4((10, 1), 1));
    let policy = FramePolicy::Training(TrainingPlan { min_frames: 4, ..TrainingPlan::default() });
    let err = VideoSource::File(path).load(&policy, &DecodeOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("one.mp4") && err.contains("1 frames") && err.contains("min_frames 4"), "{err}");
}

/// The official plan on real files: frame counts as PyAV 13.1.0 reads these very files
/// (`stream.frames` 45 for mp4/avi; 0 and no stream duration for mkv, where the official code
/// counts the 45 decoded frames), the frames `sorted(set(np.linspace(0, 44, 32, dtype=int)))`
/// (numpy 2.2.6), one second per temporal grid slot.
#[test]
fn official_plan_decodes_numpy_linspace_frames() {
    const NUMPY_45_OF_32: [usize; 32] =
        [0, 1, 2, 4, 5, 7, 8, 9, 11, 12, 14, 15, 17, 18, 19, 21, 22, 24, 25, 26, 28, 29, 31, 32, 34, 35, 36, 38, 39, 41, 42, 44];
    let dir = tmp();
    for (ext, header) in [("mp4", Some(45)), ("avi", Some(45)), ("mkv", None)] {
        let path = dir.path().join(format!("clip.{ext}"));
        write_clip(&path, 45, &mpeg4((30, 1), 12));
        let info = probe_video(&path).expect("probe");
        assert_eq!(info.header_frames, header, "{ext}");
        let policy = FramePolicy::Official { max_frames: 32 };
        let (plan, got) = VideoSource::File(path).load(&policy, &DecodeOptions::default()).expect("load");
        assert_eq!(plan.indices, NUMPY_45_OF_32, "{ext}");
        assert_eq!(codes(&got.frames), NUMPY_45_OF_32, "{ext}");
        assert!((plan.second_per_grid(2) - 1.0).abs() < 1e-12, "{ext}");
    }
}

/// Names whose numeric, Python-sorted and case orders all differ; frame `i` carries code `i`
/// in the order written. The official order is Python 3.11's
/// `sorted(p for p in Path(d).iterdir() if p.suffix.lower() in ('.jpg', '.jpeg', '.png'))`
/// over these names.
#[test]
fn frame_folder_listings_numeric_and_official() {
    let dir = tmp();
    let names: Vec<String> =
        ["1.png", "2.png", "10.png", "11.png", "9.PNG", "a.jpg", "B.jpeg", "frame_03.png", "z.webp", "Ä.png", "é.png"].map(String::from).to_vec();
    write_png_sequence(dir.path(), &names);
    let listed = |listing| -> Vec<String> {
        let folder = FrameFolder::open_listed(dir.path(), 15.0, listing).expect("open");
        folder.files().iter().map(|p| p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string()).collect()
    };
    assert_eq!(listed(FolderListing::Official), ["1.png", "10.png", "11.png", "2.png", "9.PNG", "B.jpeg", "a.jpg", "frame_03.png", "Ä.png", "é.png"]);
    assert_eq!(
        listed(FolderListing::Numeric),
        ["1.png", "2.png", "frame_03.png", "9.PNG", "10.png", "11.png", "B.jpeg", "a.jpg", "z.webp", "Ä.png", "é.png"]
    );

    // The official policy lists the folder officially, counts its 10 frames and takes
    // np.linspace(0, 9, 4, dtype=int) = [0, 3, 6, 9] of that order.
    let media = QwenMedia { video_policy: FramePolicy::Official { max_frames: 4 }, ..QwenMedia::default() };
    let source = media.source(dir.path());
    assert_eq!(source, VideoSource::FrameFolder { dir: dir.path().to_path_buf(), fps: 15.0, listing: FolderListing::Official });
    assert_eq!(source.probe().expect("probe").header_frames, Some(10));
    let (plan, got) = source.load(&media.video_policy, &DecodeOptions::default()).expect("load");
    assert_eq!(plan.indices, vec![0, 3, 6, 9]);
    assert_eq!(codes(&got.frames), vec![0, 1, 5, 10]);
    // Any other policy keeps motionvl's numeric order.
    assert_eq!(
        QwenMedia::default().source(dir.path()),
        VideoSource::FrameFolder { dir: dir.path().to_path_buf(), fps: 15.0, listing: FolderListing::Numeric }
    );
}

/// A "video" that is really a playlist or a concat list never makes FFmpeg open the files it
/// names (only media containers are demuxed), and a header declaring frames beyond 8K is
/// refused before a frame is decoded.
#[test]
fn playlists_in_disguise_and_oversized_frames_are_refused() {
    let dir = tmp();
    let real = dir.path().join("segment.mp4");
    write_clip(&real, 6, &mpeg4((15, 1), 5));
    assert!(decode_all(&real).is_ok(), "the segment itself decodes");
    for (name, text) in [
        ("playlist.mp4", "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nsegment.mp4\n#EXT-X-ENDLIST\n".to_owned()),
        ("concat.mp4", "ffconcat version 1.0\nfile 'segment.mp4'\n".to_owned()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let err = probe_video(&path).err().unwrap_or_else(|| panic!("{name} was read through the file it names"));
        assert!(matches!(err, VideoError::Open { .. }), "{name}: {err}");
        assert!(decode_all(&path).is_err(), "{name} decoded");
    }
    // A raw-video header (YUV4MPEG2) announcing 8000 × 5000 frames.
    let huge = dir.path().join("huge.y4m");
    let mut bytes = b"YUV4MPEG2 W8000 H5000 F25:1 Ip A1:1 C420jpeg\nFRAME\n".to_vec();
    bytes.extend(std::iter::repeat_n(16u8, 4096));
    std::fs::write(&huge, bytes).expect("write");
    let err = probe_video(&huge).expect_err("refused");
    assert!(matches!(err, VideoError::TooLarge { width: 8000, height: 5000, .. }), "{err}");
    assert!(err.to_string().contains("huge.y4m"), "{err}");
}

/// Decoding frees every packet it reads: the heap in use (glibc's `mallinfo2`, FFmpeg's
/// allocations included) does not grow over repeated decodes of one clip. Reusing one packet
/// across `av_read_frame` calls had leaked each packet's buffer (valgrind found it; here about
/// 16 × 45 packets' worth). The heap is process-wide, so the measurement
/// runs in a child process running this test alone.
#[test]
fn repeated_decoding_holds_no_more_memory() {
    const CHILD: &str = "MOTIONVL_HEAP_PROBE";
    let Some(clip) = std::env::var_os(CHILD) else {
        let dir = tmp();
        let path = dir.path().join("clip.mp4");
        write_clip(&path, 45, &mpeg4((30, 1), 12));
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "repeated_decoding_holds_no_more_memory", "--nocapture", "--test-threads=1"])
            .env(CHILD, &path)
            .output()
            .expect("the child test runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("heap growth over 16 decodes"), "{text}");
        println!("{}", text.lines().find(|l| l.contains("heap growth")).unwrap_or_default());
        return;
    };
    let in_use = || unsafe { libc::mallinfo2() }.uordblks;
    let decode = || assert_eq!(decode_all(Path::new(&clip)).expect("decode").timestamps.len(), 45);
    // FFmpeg's one-time tables, glibc's per-thread caches and the decoder threads' arenas settle
    // over the first decodes (measured: +28 kB after 4, +43 kB after 16, +48 kB after 32).
    (0..16).for_each(|_| decode());
    let before = in_use();
    (0..16).for_each(|_| decode());
    let growth = in_use().saturating_sub(before);
    println!("heap growth over 16 decodes: {growth} bytes");
    assert!(growth < 32 * 1024, "the heap grew by {growth} bytes over 16 decodes of a 45-frame clip");
}
