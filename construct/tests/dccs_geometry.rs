//! UAV-DualCog construction, inputs and flight geometry: the handoff files and their errors,
//! every maneuver at its defaults, smoothing, clearance screening, repair and rejection.

use std::path::Path;

use motionvl_construct::dccs::cloud::{PointCloud, VoxelGrid, read_cloud, write_ply};
use motionvl_construct::dccs::geom::V3;
use motionvl_construct::dccs::instances::{Category, Landmark, OrientedBox, read_instances, write_instances};
use motionvl_construct::dccs::maneuvers::{Composite, Direction, Element, Maneuver};
use motionvl_construct::dccs::trajectory::{
    KinematicLimits, Kinematics, Obstacles, TrajectoryConfig, check_kinematics, compose, plan, resample, screen, smooth,
};
use motionvl_construct::synth::rng::SynthRng;
use serde_json::json;

fn tower() -> OrientedBox {
    OrientedBox { center: V3::new(0.0, 0.0, 10.0), size: V3::new(6.0, 4.0, 20.0), yaw_deg: 30.0 }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn instance(id: &str, category: &str, size: [f64; 3]) -> serde_json::Value {
    json!({"instance_id": id, "landmark_category": category, "landmark_subcategory": "water tower",
           "landmark_description": "a tall white water tower", "center_3d": [1.0, 2.0, 5.0],
           "bbox_3d": {"size": size, "yaw_deg": 15.0}})
}

#[test]
fn instances_round_trip_and_bad_ones_name_the_landmark() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("valid_instances.json");
    let lm = Landmark {
        id: "lm_1".into(),
        category: Category::IndustrialInfrastructure,
        subcategory: "silo".into(),
        description: "a red grain silo".into(),
        bbox: tower(),
        support_points: vec![V3::new(3.0, 0.0, 5.0), V3::new(0.0, 2.0, 19.0)],
    };
    write_instances(&good, std::slice::from_ref(&lm)).unwrap();
    assert_eq!(read_instances(&good).unwrap(), vec![lm]);

    let bare = dir.path().join("bare.json");
    std::fs::write(&bare, json!([instance("a", "Building", [4.0, 4.0, 10.0])]).to_string()).unwrap();
    let read = read_instances(&bare).unwrap();
    assert_eq!(read[0].category, Category::Building);
    assert!(!read[0].support_points.is_empty(), "the box surface stands in for missing support points");

    let cases = [
        (instance("castle_1", "castle", [4.0, 4.0, 4.0]), "castle_1", "not one of"),
        (instance("flat_1", "building", [4.0, 0.0, 4.0]), "flat_1", "degenerate box"),
        (
            json!({"instance_id": "long_1", "landmark_category": "other", "landmark_description":
                   "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twentyone",
                   "center_3d": [0, 0, 0], "bbox_3d": [0, 0, 0, 1, 1, 1, 0]}),
            "long_1",
            "21 words",
        ),
    ];
    for (row, id, needle) in cases {
        let p = dir.path().join(format!("{id}.json"));
        std::fs::write(&p, json!({ "valid_instances": [row] }).to_string()).unwrap();
        let e = read_instances(&p).unwrap_err().to_string();
        assert!(e.contains(id) && e.contains(needle) && e.contains(&*p.to_string_lossy()), "{e}");
    }
    // Rows the review dropped or left unlabeled are not landmarks.
    let mut dropped = instance("gone", "castle", [1.0, 1.0, 1.0]);
    dropped["review_action"] = json!("delete");
    let mut pending = instance("pending", "castle", [1.0, 1.0, 1.0]);
    pending["annotation_status"] = json!("pending");
    let reviewed = dir.path().join("reviewed.json");
    std::fs::write(&reviewed, json!([dropped, pending, instance("kept", "vehicle", [4.0, 2.0, 1.5])]).to_string()).unwrap();
    assert_eq!(read_instances(&reviewed).unwrap().iter().map(|l| l.id.as_str()).collect::<Vec<_>>(), ["kept"]);

    let twice = dir.path().join("twice.json");
    std::fs::write(&twice, json!([instance("a", "other", [1.0, 1.0, 1.0]), instance("a", "other", [1.0, 1.0, 1.0])]).to_string()).unwrap();
    assert!(read_instances(&twice).unwrap_err().to_string().contains("appears twice"));
}

#[test]
fn clouds_in_every_format_and_empty_ones_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pts = vec![V3::new(1.0, 2.0, 3.0), V3::new(-4.5, 0.25, 8.0)];
    for binary in [false, true] {
        let p = dir.path().join(format!("c{binary}.ply"));
        write_ply(&p, &pts, binary).unwrap();
        assert_eq!(read_cloud(&p).unwrap(), PointCloud { points: pts.clone() }, "binary {binary}");
    }
    // A PLY with extra properties, doubles and colours.
    let mut ply = b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty uchar red\nproperty double x\nproperty double y\nproperty double z\nend_header\n".to_vec();
    ply.push(7);
    for c in [1.5f64, -2.0, 0.5] {
        ply.extend_from_slice(&c.to_le_bytes());
    }
    std::fs::write(dir.path().join("d.ply"), &ply).unwrap();
    assert_eq!(read_cloud(&dir.path().join("d.ply")).unwrap().points, vec![V3::new(1.5, -2.0, 0.5)]);

    let xyz = write(dir.path(), "c.xyz", "# x y z\n1 2 3\n-4.5,0.25,8 255 0 0\n");
    assert_eq!(read_cloud(&xyz).unwrap().points, pts);

    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    for p in &pts {
        for c in p.to_array() {
            npy.extend_from_slice(&(c as f32).to_le_bytes());
        }
    }
    std::fs::write(dir.path().join("c.npy"), &npy).unwrap();
    assert_eq!(read_cloud(&dir.path().join("c.npy")).unwrap().points, pts);

    let empty = write(dir.path(), "empty.xyz", "# nothing\n");
    let e = read_cloud(&empty).unwrap_err().to_string();
    assert!(e.contains("empty.xyz") && e.contains("empty"), "{e}");
    let bad = write(dir.path(), "bad.xyz", "1 2\n");
    assert!(read_cloud(&bad).unwrap_err().to_string().contains("line 1"));
}

fn at_defaults(m: Maneuver) -> Element {
    Element::with_defaults(m)
}

#[test]
fn approach_travels_40_m_and_descends_15_m_at_defaults() {
    let from = V3::new(60.0, 0.0, 40.0);
    let path = at_defaults(Maneuver::GradualApproach).path(&tower(), from).points;
    let end = *path.last().unwrap();
    assert!(((end - from).horizontal_length() - 40.0).abs() < 1e-9);
    assert!((end.z - (from.z - 15.0)).abs() < 1e-9);
    assert!(end.horizontal_length() < from.horizontal_length(), "towards the landmark");
    let depart = at_defaults(Maneuver::GradualDepart).path(&tower(), end).points;
    let out = *depart.last().unwrap();
    assert!(((out - end).horizontal_length() - 40.0).abs() < 1e-9 && (out.z - end.z - 15.0).abs() < 1e-9);
    assert!(out.horizontal_length() > end.horizontal_length(), "away from the landmark");
}

#[test]
fn orbits_keep_their_radius_arc_and_direction() {
    let b = tower();
    let r = b.footprint_radius() + 12.0;
    let from = V3::new(30.0, 0.0, 25.0);
    let mut e = at_defaults(Maneuver::CircularOrbit);
    for direction in [Direction::Cw, Direction::Ccw] {
        e.direction = direction;
        let path = e.path(&b, from).points;
        for p in &path {
            assert!(((*p - b.center).horizontal_length() - r).abs() < 1e-9);
            assert!((p.z - (b.top() + 8.0)).abs() < 1e-9);
        }
        let swept: f64 = path
            .windows(2)
            .map(|w| {
                let (a, c) = (w[0] - b.center, w[1] - b.center);
                (a.x * c.y - a.y * c.x).atan2(a.x * c.x + a.y * c.y).to_degrees()
            })
            .sum();
        assert!((swept - 180.0 * direction.sign()).abs() < 1e-6, "{swept}");
    }
    // Square and triangle: every point at least the in-radius from the centre.
    for m in [Maneuver::SquareOrbit, Maneuver::TriangularOrbit] {
        let inr = b.footprint_radius() + 14.0;
        let path = at_defaults(m).path(&b, from).points;
        assert!(path.iter().all(|p| (*p - b.center).horizontal_length() >= inr - 1e-6), "{m:?}");
        let first = path[0];
        let last = *path.last().unwrap();
        assert!((first - last).length() < 1e-6, "{m:?} at its default edge count closes the loop");
    }
    // The spiral widens from its start to its end extension and rises.
    let s = at_defaults(Maneuver::SpiralOrbit).path(&b, from).points;
    let (a, z) = (s[0], *s.last().unwrap());
    assert!(((a - b.center).horizontal_length() - b.footprint_radius() - 10.0).abs() < 1e-9);
    assert!(((z - b.center).horizontal_length() - b.footprint_radius() - 24.0).abs() < 1e-9);
    assert!((z.z - a.z - 24.0).abs() < 1e-9);
}

/// Whether segments `ab` and `cd` cross properly in the horizontal plane.
fn crosses(a: V3, b: V3, c: V3, d: V3) -> bool {
    let orient = |p: V3, q: V3, r: V3| (q.x - p.x) * (r.y - p.y) - (q.y - p.y) * (r.x - p.x);
    orient(a, b, c) * orient(a, b, d) < 0.0 && orient(c, d, a) * orient(c, d, b) < 0.0
}

#[test]
fn figure_eight_crosses_itself_and_other_maneuvers_stay_clear() {
    let b = tower();
    let path = at_defaults(Maneuver::Figure8Orbit).path(&b, V3::new(40.0, 0.0, 25.0)).points;
    let n = path.len();
    let mut crossing = false;
    'outer: for i in 0..n - 1 {
        for j in i + 2..n - 1 {
            if crosses(path[i], path[i + 1], path[j], path[j + 1]) {
                crossing = true;
                break 'outer;
            }
        }
    }
    assert!(crossing, "a figure-eight crosses itself");
    // Missions start an approach's travel plus an orbit's default extension out.
    let far = V3::new(b.footprint_radius() + 12.0 + 40.0, 0.0, 25.0);
    for m in Maneuver::ALL {
        let path = at_defaults(m).path(&b, far).points;
        assert!(path.len() >= 2, "{m:?}");
        let inside = path.iter().any(|p| b.contains_expanded(*p, 0.5, 0.3));
        assert!(!inside, "{m:?} enters the landmark at its defaults");
    }
    let comet = at_defaults(Maneuver::Comet).path(&b, V3::new(40.0, 0.0, 25.0)).points;
    let nearest = comet.iter().map(|p| (*p - b.center).horizontal_length()).fold(f64::INFINITY, f64::min);
    // Periapsis a·(1 − e) of the default ellipse, beyond the footprint plus the extension.
    assert!((nearest - 60.0 * 0.45).abs() < 0.05 && nearest >= b.footprint_radius() + 18.0, "{nearest}");
}

#[test]
fn parameters_snap_to_their_grid_and_composites_have_their_steps() {
    let arc = Maneuver::CircularOrbit.spec("arc_deg").unwrap();
    assert_eq!((arc.default, arc.min, arc.max, arc.step), (180.0, 45.0, 720.0, 90.0));
    assert_eq!(arc.snap(1000.0), 675.0);
    assert_eq!(arc.snap(100.0), 135.0);
    let mut rng = SynthRng::new(3);
    for m in Maneuver::ALL {
        for s in m.params() {
            let v = s.draw(&mut rng);
            assert!(v >= s.min - 1e-9 && v <= s.max + 1e-9, "{m:?} {}", s.name);
            assert!((((v - s.min) / s.step).round() * s.step + s.min - v).abs() < 1e-9);
        }
    }
    let keys = |c: Composite| c.elements(&mut SynthRng::new(1)).iter().map(|e| e.maneuver.key()).collect::<Vec<_>>();
    assert_eq!(keys(Composite::CircularInspection), ["gradual_approach", "circular_orbit", "circular_orbit", "gradual_depart"]);
    assert_eq!(keys(Composite::SurfaceMappingInspection), ["gradual_approach", "surface_mapping", "gradual_depart"]);
}

#[test]
fn resampling_and_smoothing_keep_the_endpoints() {
    let pts = vec![V3::new(0.0, 0.0, 0.0), V3::new(10.0, 0.0, 0.0), V3::new(10.0, 10.0, 5.0)];
    let r = resample(&pts, 2.0);
    assert_eq!(r[0], pts[0]);
    assert!((*r.last().unwrap() - pts[2]).length() < 1e-9);
    for w in r.windows(2) {
        let d = (w[1] - w[0]).length();
        assert!(d <= 2.0 + 1e-6 && d > 1.5, "{d}");
    }
    let s = smooth(&r, 7);
    assert_eq!((s[0], *s.last().unwrap()), (r[0], *r.last().unwrap()));
    assert!((s[r.len() / 2] - r[r.len() / 2]).length() > 1e-3, "the corner is smoothed");
}

fn ground_and_wall(wall_at: Option<f64>) -> Vec<V3> {
    let mut pts = Vec::new();
    for i in -40..=40 {
        for j in -40..=40 {
            pts.push(V3::new(i as f64 * 2.0, j as f64 * 2.0, 0.0));
        }
    }
    if let Some(x) = wall_at {
        for j in -40..=40 {
            for k in 0..=30 {
                pts.push(V3::new(x, j as f64, k as f64));
            }
        }
    }
    pts
}

#[test]
fn accepted_trajectories_keep_clearance_and_obstacles_are_repaired_or_rejected() {
    let cfg = TrajectoryConfig::default();
    let b = tower();
    let start = V3::new(40.0, 0.0, 30.0);
    // An orbit that dips to 2 m above the ground is lifted until it clears it.
    let mut low = at_defaults(Maneuver::CircularOrbit);
    low.params.insert("altitude_offset_m".into(), -19.0);
    let cloud = ground_and_wall(None);
    let grid = VoxelGrid::new(&cloud, cfg.clearance_m);
    let obstacles = Obstacles { grid: &grid, keepouts: vec![("tower", b)] };
    assert!(screen(&compose(std::slice::from_ref(&low), &b, start, &cfg), &obstacles, &cfg).is_some());
    let planned = plan(vec![low], &b, start, &obstacles, &cfg).unwrap();
    assert!(!planned.repairs.is_empty(), "repaired");
    for f in &planned.trajectory.frames {
        let nearest = cloud.iter().map(|p| (*p - f.pos).length()).fold(f64::INFINITY, f64::min);
        assert!(nearest >= cfg.clearance_m, "frame at {:?} is {nearest} m from the cloud", f.pos);
        assert!(!b.contains_expanded(f.pos, 0.5, 0.3));
    }
    // A wall through the whole approach cannot be repaired away: rejected with its reason.
    let walled = ground_and_wall(Some(20.0));
    let grid = VoxelGrid::new(&walled, cfg.clearance_m);
    let obstacles = Obstacles { grid: &grid, keepouts: vec![("tower", b)] };
    let reason = plan(vec![at_defaults(Maneuver::GradualApproach)], &b, V3::new(50.0, 0.0, 20.0), &obstacles, &cfg).unwrap_err();
    assert!(reason.contains("point cloud") && reason.contains("gradual_approach") && reason.contains("repairs"), "{reason}");
}

#[test]
fn the_kinematic_check_flags_fast_flights() {
    let cfg = TrajectoryConfig::default();
    let traj = compose(&[at_defaults(Maneuver::GradualApproach)], &tower(), V3::new(60.0, 0.0, 40.0), &cfg);
    let v = check_kinematics(&traj, &KinematicLimits::default()).unwrap();
    assert!(v.to_string().contains("speed"), "{v}");
    let mut slow = at_defaults(Maneuver::GradualApproach);
    slow.params.insert("speed_mps".into(), 5.0);
    let traj = compose(std::slice::from_ref(&slow), &tower(), V3::new(60.0, 0.0, 40.0), &cfg);
    assert_eq!(check_kinematics(&traj, &KinematicLimits::default()), None);

    // With the check on, a plan records the verdict and keeps the mission.
    let checked = TrajectoryConfig { kinematics: Some(KinematicLimits::default()), ..cfg };
    let grid = VoxelGrid::new(&[V3::new(500.0, 500.0, 0.0)], 2.0);
    let open = Obstacles { grid: &grid, keepouts: Vec::new() };
    let fast = plan(vec![at_defaults(Maneuver::GradualApproach)], &tower(), V3::new(60.0, 0.0, 40.0), &open, &checked);
    assert!(matches!(fast.unwrap().kinematics, Kinematics::Infeasible(v) if v.contains("speed")));
    let ok = plan(vec![slow], &tower(), V3::new(60.0, 0.0, 40.0), &open, &checked).unwrap();
    assert_eq!(ok.kinematics, Kinematics::Feasible);
}

#[test]
fn visibility_flips_when_a_box_occludes_the_target() {
    use motionvl_construct::dccs::visibility::{Camera, VisibilityConfig, frame_visibility, possible_occluders, runs, seconds};
    let cfg = VisibilityConfig::default();
    // A 4 m square target 30 m ahead, facing the camera.
    let target: Vec<V3> = (0..=8).flat_map(|i| (0..=8).map(move |j| V3::new(30.0, -2.0 + i as f64 * 0.5, 8.0 + j as f64 * 0.5))).collect();
    let camera = Camera::new(V3::new(0.0, 0.0, 10.0), V3::new(1.0, 0.0, 0.0), 640, 480, 90.0);
    let clear = frame_visibility(&camera, &target, &target, &cfg);
    assert_eq!((clear.in_frame, clear.visible_points), (81, 81));
    let b = clear.bbox.expect("visible");
    assert!(b[0] < 0.5 && 0.5 < b[2] && b[1] < 0.5 && 0.5 < b[3], "{b:?}");
    assert!(b.iter().all(|c| (0.0..=1.0).contains(c)));
    // A box's surface points halfway hide it.
    let boxed = |x: f64| OrientedBox { center: V3::new(x, 0.0, 10.0), size: V3::new(2.0, 6.0, 6.0), yaw_deg: 0.0 };
    let scene = |x: f64| boxed(x).surface_points(0.1).into_iter().chain(target.iter().copied()).collect::<Vec<_>>();
    let occluded = scene(15.0);
    // Points 0.1 m apart are 2 pixels apart there: one pixel each leaves holes to see through,
    // squares of their spacing close them.
    assert!(frame_visibility(&camera, &target, &occluded, &cfg).visible_points > 0);
    let splat = VisibilityConfig { splat_radius_m: 0.05, ..cfg.clone() };
    let hidden = frame_visibility(&camera, &target, &occluded, &splat);
    assert_eq!((hidden.in_frame, hidden.visible_points, hidden.bbox), (81, 0, None));
    // Behind the target the same box changes nothing.
    assert!(frame_visibility(&camera, &target, &scene(45.0), &splat).visible());
    // Only points between the eye and the target can occlude: the crop changes no verdict.
    for x in [15.0, 45.0] {
        let all = scene(x);
        let crop = possible_occluders(&all, &[camera.eye], &target, splat.splat_radius_m);
        assert!(crop.len() < all.len() || x == 15.0);
        assert_eq!(frame_visibility(&camera, &target, &crop, &splat), frame_visibility(&camera, &target, &all, &splat));
    }
    // Too few points, or too small a box, is not visible.
    assert!(!frame_visibility(&camera, &target[..10], &[], &cfg).visible());
    let far = Camera::new(V3::new(-3000.0, 0.0, 10.0), V3::new(1.0, 0.0, 0.0), 640, 480, 90.0);
    assert!(!frame_visibility(&far, &target, &[], &cfg).visible());

    let flags = [false, true, true, false, false, true, true, true];
    assert_eq!(runs(&flags), vec![(1, 2), (5, 7)]);
    assert_eq!(seconds((5, 7), 10.0), [0.5, 0.7]);
}

/// Counts and sizes read from a header are checked before anything is allocated: each gives an
/// error naming the file, never an overflow panic or an allocation abort.
#[test]
fn clouds_and_boxes_with_huge_header_counts_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let huge = usize::MAX / 4;
    let binary = {
        let mut b = format!(
            "ply\nformat binary_little_endian 1.0\nelement vertex {huge}\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
        )
        .into_bytes();
        b.extend([0u8; 24]);
        b
    };
    let ascii = format!(
        "ply\nformat ascii 1.0\nelement face {huge}\nproperty list uchar int vertex_indices\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n3 0 1 2\n1 2 3\n4 5 6\n"
    );
    let ascii_vertices =
        format!("ply\nformat ascii 1.0\nelement vertex {huge}\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n");
    let npy = {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({huge}, 3), }}");
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((header.len() as u16).to_le_bytes());
        b.extend(header.as_bytes());
        b.extend([0u8; 24]);
        b
    };
    for (name, bytes, says) in [
        ("binary.ply", binary, "overflow"),
        ("faces.ply", ascii.into_bytes(), "before `vertex`"),
        ("ascii.ply", ascii_vertices.into_bytes(), "ends after 1 of"),
        ("huge.npy", npy, "overflows"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = read_cloud(&path).err().unwrap_or_else(|| panic!("{name} read")).to_string();
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }

    let instances = dir.path().join("valid_instances.json");
    let row = serde_json::json!({"valid_instances": [{"instance_id": "tower", "landmark_category": "building", "landmark_description": "a very tall tower", "bbox_3d": [0.0, 0.0, 50.0, 20.0, 20.0, 1.0e6, 0.0]}]});
    std::fs::write(&instances, row.to_string()).unwrap();
    let err = read_instances(&instances).expect_err("a 1000 km tower").to_string();
    assert!(err.contains("tower") && err.contains("1000 m"), "{err}");
}
