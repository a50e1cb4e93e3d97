//! The vector index's backends against each other: the graph against the
//! exact scan, a saved graph read back against the one built.

use super::persist::links_file;
use super::saved_vectors;
use super::*;
use crate::index::similarity::dot;
use crate::index::similarity::tests::unit;

#[test]
fn finds_the_nearest_tool_by_its_best_vector_and_forgets_removed_ones() {
    let mut index = VectorIndex::new(384);
    for i in 0..100 {
        index.insert(
            Arc::from(format!("s.tool{i}")),
            "h",
            true,
            &[unit(i, 384), unit(i + 1000, 384)],
        );
    }
    assert_eq!((index.tools(), index.vectors()), (100, 200));
    let found = index.search(&unit(42, 384), 5, |_| true);
    assert_eq!(&*found[0].0, "s.tool42");
    assert!((found[0].1 - 1.0).abs() < 1e-4);
    assert_eq!(found.len(), 5);
    assert_eq!(
        &*index.search(&unit(1007, 384), 1, |_| true)[0].0,
        "s.tool7"
    );

    index.remove("s.tool42");
    assert_eq!((index.tools(), index.vectors()), (99, 198));
    let found = index.search(&unit(42, 384), 200, |_| true);
    assert_eq!(found.len(), 99);
    assert!(found.iter().all(|(tool, _)| &**tool != "s.tool42"));
    // Every other tool is still found by each of its vectors.
    for i in (0..100).filter(|i| *i != 42) {
        assert_eq!(
            &*index.search(&unit(i, 384), 1, |_| true)[0].0,
            format!("s.tool{i}")
        );
        assert_eq!(
            &*index.search(&unit(i + 1000, 384), 1, |_| true)[0].0,
            format!("s.tool{i}")
        );
    }
}

#[test]
fn replacing_a_tool_drops_its_old_vectors_and_filters_apply() {
    let mut index = VectorIndex::new(16);
    index.insert(Arc::from("a.x"), "h", true, &[unit(1, 16)]);
    index.insert(Arc::from("b.y"), "h", true, &[unit(2, 16)]);
    index.insert(Arc::from("a.x"), "h2", true, &[unit(3, 16)]);
    assert_eq!(index.vectors(), 2);
    assert_eq!(&*index.search(&unit(3, 16), 1, |_| true)[0].0, "a.x");
    assert_ne!(index.search(&unit(1, 16), 1, |_| true)[0].1, 1.0);
    let only_b = index.search(&unit(3, 16), 5, |tool| tool.starts_with("b."));
    assert_eq!(only_b.len(), 1);
    assert_eq!(&*only_b[0].0, "b.y");
    // Wrong-dimension queries find nothing rather than panic.
    assert!(index.search(&unit(3, 8), 5, |_| true).is_empty());
}

/// Two indexes with the same tools: one left exact (the oracle), one
/// turned into a graph.
fn exact_and_graph(tools: u64, dims: usize) -> (VectorIndex, VectorIndex) {
    let fill = |index: &mut VectorIndex| {
        for i in 0..tools {
            index.insert(
                Arc::from(format!("s.tool{i}")),
                "h",
                true,
                &[unit(i, dims), unit(i + 100_000, dims)],
            );
        }
    };
    let (mut exact, mut graph) = (VectorIndex::new(dims), VectorIndex::new(dims));
    fill(&mut exact);
    fill(&mut graph);
    assert_eq!(graph.reshape_due(1000), Some(Reshape::BuildGraph));
    let built = graph
        .build_graph(&std::sync::atomic::AtomicBool::new(false))
        .expect("not stopped");
    graph.install(built);
    assert!(graph.is_graph());
    assert_eq!(graph.reshape_due(1000), None);
    (exact, graph)
}

/// The same tools, scores within f16 rounding (vectors that went
/// through a graph are half-precision copies): a near tie may swap
/// places, but at most one tool of ten may differ.
fn same_ranking(a: &[(Arc<str>, f32)], b: &[(Arc<str>, f32)]) {
    assert_eq!(a.len(), b.len());
    let mut shared = 0;
    for (tool, score) in a {
        if let Some((_, other)) = b.iter().find(|(t, _)| t == tool) {
            assert!((score - other).abs() < 2e-3, "{tool}: {score} / {other}");
            shared += 1;
        }
    }
    assert!(shared + 1 >= a.len(), "{a:?} / {b:?}");
}

fn recall_at_10(exact: &VectorIndex, graph: &VectorIndex, dims: usize) -> f64 {
    let mut hits = 0;
    for q in 0..50 {
        let query = unit(q + 7_000_000, dims);
        let truth: Vec<Arc<str>> = exact
            .search(&query, 10, |_| true)
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        let found = graph.search(&query, 10, |_| true);
        assert_eq!(found.len(), 10);
        hits += found.iter().filter(|(t, _)| truth.contains(t)).count();
    }
    hits as f64 / 500.0
}

#[test]
fn the_graph_agrees_with_the_exact_scan_and_never_returns_removed_tools() {
    let dims = 16;
    let (mut exact, mut graph) = exact_and_graph(700, dims);
    assert_eq!((graph.tools(), graph.vectors()), (700, 1400));
    let recall = recall_at_10(&exact, &graph, dims);
    assert!(recall >= 0.95, "recall@10 {recall}");
    // Scores are the cosine the scan gives, within f16 rounding.
    let query = unit(42, dims);
    let (top, score) = graph.search(&query, 1, |_| true).remove(0);
    assert_eq!(&*top, "s.tool42");
    assert!((score - 1.0).abs() < 1e-3, "{score}");

    // Removed tools are tombstones: never found, even by their own
    // vectors; a quarter of them asks for a rebuild.
    for i in 0..200 {
        graph.remove(&format!("s.tool{i}"));
        exact.remove(&format!("s.tool{i}"));
    }
    assert_eq!((graph.tools(), graph.vectors()), (500, 1000));
    for i in (0..200).step_by(17) {
        let found = graph.search(&unit(i, dims), 20, |_| true);
        assert!(found.iter().all(|(t, _)| {
            t.strip_prefix("s.tool")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= 200)
        }));
    }
    // New tools go into the graph as they come.
    graph.insert(Arc::from("t.new"), "h", true, &[unit(999_999, dims)]);
    exact.insert(Arc::from("t.new"), "h", true, &[unit(999_999, dims)]);
    assert_eq!(
        &*graph.search(&unit(999_999, dims), 1, |_| true)[0].0,
        "t.new"
    );
    assert_eq!(graph.reshape_due(1000), Some(Reshape::BuildGraph));
    let rebuilt = graph
        .build_graph(&std::sync::atomic::AtomicBool::new(false))
        .expect("not stopped");
    graph.install(rebuilt);
    assert_eq!(graph.shape().tombstones, 0);
    assert_eq!(graph.shape().vectors, 1001);
    let recall = recall_at_10(&exact, &graph, dims);
    assert!(recall >= 0.95, "recall@10 after the rebuild {recall}");

    // A filter keeping a few tools still finds them (one by one).
    let few = |t: &str| ["s.tool300", "s.tool600", "t.new"].contains(&t);
    let found = graph.search(&unit(600, dims), 10, few);
    let names: Vec<&str> = found.iter().map(|(t, _)| &**t).collect();
    assert_eq!(names.len(), 3);
    assert_eq!(names[0], "s.tool600");

    // Shrunk below half the threshold: back to the scan, the same
    // answers (the vectors are the graph's f16 copies).
    assert_eq!(graph.reshape_due(10_000), Some(Reshape::BackToExact));
    graph.back_to_exact();
    assert!(!graph.is_graph());
    for q in 0..20 {
        let query = unit(q + 5_000_000, dims);
        same_ranking(
            &graph.search(&query, 10, |_| true),
            &exact.search(&query, 10, |_| true),
        );
    }
    // And the vectors per tool are the ones put in.
    let mine = graph.vectors_of(|t| t == "s.tool650");
    assert_eq!(mine.len(), 1);
    assert_eq!(mine["s.tool650"].len(), 2);
    assert!((dot(&mine["s.tool650"][0], &unit(650, dims)) - 1.0).abs() < 1e-3);
}

#[test]
fn a_saved_graph_loads_back_whole_and_a_damaged_one_is_refused() {
    let dims = 16;
    let (_, mut graph) = exact_and_graph(520, dims);
    graph.remove("s.tool3");
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("vectors");
    assert!(matches!(VectorIndex::load(&dir, dims, "m"), Ok(None)));
    graph.save(&dir, 7, "m").expect("saved");
    graph.mark_saved();

    let (loaded, generation) = VectorIndex::load(&dir, dims, "m")
        .expect("readable")
        .expect("there");
    assert_eq!(generation, 7);
    assert!(loaded.is_graph());
    assert!(loaded.shape().loaded);
    assert_eq!(loaded.shape().tombstones, 2);
    assert_eq!((loaded.tools(), loaded.vectors()), (519, 1038));
    assert!(loaded.holds("s.tool4", "h"));
    assert!(!loaded.holds("s.tool4", "other"));
    assert!(!loaded.contains("s.tool3"));
    for q in 0..20 {
        let query = unit(q + 3_000_000, dims);
        same_ranking(
            &loaded.search(&query, 10, |_| true),
            &graph.search(&query, 10, |_| true),
        );
    }
    // Another model's vectors, or files changed since they were
    // written, are refused (hnsw_rs would end the process on some).
    assert!(matches!(
        VectorIndex::load(&dir, dims, "other model"),
        Err(VectorError::Unusable(_))
    ));
    // Each file is checked: the byte vectors and the links (read on
    // the loading thread) as well as the f16 vectors below.
    for name in [saved_vectors::I8_FILE.to_owned(), links_file()] {
        let path = dir.join(&name);
        let written = std::fs::read(&path).expect("saved file");
        let mut damaged = written.clone();
        let at = damaged.len() - 3;
        damaged[at] ^= 0x55;
        std::fs::write(&path, &damaged).expect("damaged");
        assert!(
            matches!(
                VectorIndex::load(&dir, dims, "m"),
                Err(VectorError::Unusable(_))
            ),
            "{name}"
        );
        std::fs::write(&path, &written).expect("restored");
    }
    assert!(matches!(VectorIndex::load(&dir, dims, "m"), Ok(Some(_))));
    let data = dir.join(saved_vectors::F16_FILE);
    let mut bytes = std::fs::read(&data).expect("data");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&data, &bytes).expect("damaged");
    assert!(matches!(
        VectorIndex::load(&dir, dims, "m"),
        Err(VectorError::Unusable(_))
    ));
    bytes.truncate(middle);
    std::fs::write(&data, &bytes).expect("truncated");
    assert!(matches!(
        VectorIndex::load(&dir, dims, "m"),
        Err(VectorError::Unusable(_))
    ));
    // The exact backend saves nothing and clears what was saved.
    let mut small = VectorIndex::new(dims);
    small.insert(Arc::from("a.b"), "h", true, &[unit(1, dims)]);
    small.save(&dir, 8, "m").expect("cleared");
    assert!(!dir.exists());
}

#[test]
fn a_saved_index_answers_from_its_vectors_in_place_until_its_graph_takes_over() {
    let dims = 16;
    let (exact, mut graph) = exact_and_graph(520, dims);
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("vectors");
    graph.save(&dir, 9, "m").expect("saved");
    graph.mark_saved();

    let (mut opened, generation, pending) = VectorIndex::open_saved(&dir, dims, "m")
        .expect("readable")
        .expect("there");
    assert_eq!(generation, 9);
    let shape = opened.shape();
    assert_eq!(shape.backend, VectorBackend::Loading);
    assert_eq!((shape.vectors, shape.loaded), (1040, false));
    // The scan of the saved vectors is exact (f16 copies): it agrees
    // with the exact index.
    for q in 0..20 {
        let query = unit(q + 4_000_000, dims);
        same_ranking(
            &opened.search(&query, 10, |_| true),
            &exact.search(&query, 10, |_| true),
        );
    }
    // Changes while the graph loads: a tool removed, one added, one
    // replaced; nothing is saved meanwhile, and the saved files stay.
    opened.remove("s.tool5");
    opened.insert(Arc::from("t.new"), "h", true, &[unit(777_777, dims)]);
    opened.insert(Arc::from("s.tool6"), "h2", true, &[unit(888_888, dims)]);
    assert!(opened.is_graph());
    assert_eq!(opened.shape().vectors, 1038);
    assert!(!opened.save_due());
    assert_eq!(opened.reshape_due(100), None);
    opened.save(&dir, 10, "m").expect("nothing to write");
    assert!(dir.join("meta.json").exists());
    let top = |index: &VectorIndex, seed: u64| {
        index.search(&unit(seed, dims), 1, |_| true)[0]
            .0
            .to_string()
    };
    assert_eq!(top(&opened, 777_777), "t.new");
    assert_eq!(top(&opened, 888_888), "s.tool6");
    assert_ne!(top(&opened, 5), "s.tool5");
    let mine = opened.vectors_of(|t| t == "s.tool7" || t == "t.new");
    assert_eq!((mine["s.tool7"].len(), mine["t.new"].len()), (2, 1));

    // The graph takes over with those changes.
    let loaded = pending.load().expect("loaded");
    assert!(opened.install_loaded(loaded));
    let shape = opened.shape();
    assert_eq!(shape.backend, VectorBackend::Graph);
    assert!(shape.loaded);
    assert_eq!((shape.vectors, shape.tombstones), (1038, 4));
    assert_eq!(top(&opened, 777_777), "t.new");
    assert_eq!(top(&opened, 888_888), "s.tool6");
    assert_ne!(top(&opened, 5), "s.tool5");

    // A graph for another opening (the index moved on) is refused.
    let (_, _, pending) = VectorIndex::open_saved(&dir, dims, "m")
        .expect("readable")
        .expect("there");
    assert!(!opened.install_loaded(pending.load().expect("loaded")));
    assert!(opened.shape().loaded);
}

#[test]
fn a_graph_read_back_from_its_files_walks_like_the_one_built_and_takes_new_tools_until_rebuilt() {
    let dims = 16;
    let (exact, mut graph) = exact_and_graph(520, dims);
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("vectors");
    graph.save(&dir, 1, "m").expect("saved");
    graph.mark_saved();
    let read_back = || {
        let (mut index, _, pending) = VectorIndex::open_saved(&dir, dims, "m")
            .expect("readable")
            .expect("there");
        assert!(index.install_loaded(pending.load().expect("links read")));
        index
    };

    // The walk over the links read back finds what hnsw_rs's own walk
    // of the graph it built finds.
    let walked = read_back();
    let (ours, theirs) = (
        recall_at_10(&exact, &walked, dims),
        recall_at_10(&exact, &graph, dims),
    );
    assert!(ours >= 0.95 && ours + 0.02 >= theirs, "{ours} / {theirs}");

    // The graph built here trades itself for its saved form, once:
    // same answers, and it still counts as built by this process.
    let before: Vec<_> = (0..10)
        .map(|q| graph.search(&unit(q + 5_000_000, dims), 10, |_| true))
        .collect();
    let replaced = graph.adopt_saved(read_back()).expect("adopted");
    assert_eq!(replaced.shape().backend, VectorBackend::Graph);
    let shape = graph.shape();
    assert_eq!((shape.backend, shape.loaded), (VectorBackend::Graph, false));
    for (q, before) in before.iter().enumerate() {
        same_ranking(
            &graph.search(&unit(q as u64 + 5_000_000, dims), 10, |_| true),
            before,
        );
    }
    assert!(graph.adopt_saved(read_back()).is_none());
    // Nor does a graph changed since its save.
    let mut unsaved = VectorIndex::new(dims);
    for i in 0..60u64 {
        unsaved.insert(Arc::from(format!("s.tool{i}")), "h", true, &[unit(i, dims)]);
    }
    let built = unsaved
        .build_graph(&std::sync::atomic::AtomicBool::new(false))
        .expect("not stopped");
    unsaved.install(built);
    assert!(unsaved.adopt_saved(read_back()).is_none());

    // New tools are scanned beside the walk (and found at once); past
    // a tenth of the saved points the graph is due to be built again,
    // with them.
    for i in 0..52u64 {
        let tool: Arc<str> = Arc::from(format!("new.tool{i}"));
        graph.insert(
            tool,
            "h",
            true,
            &[unit(i + 9_000_000, dims), unit(i + 9_500_000, dims)],
        );
    }
    assert_eq!(graph.reshape_due(100), None);
    assert_eq!(
        &*graph.search(&unit(9_000_051, dims), 1, |_| true)[0].0,
        "new.tool51"
    );
    graph.remove("s.tool1");
    graph.insert(Arc::from("new.last"), "h", true, &[unit(9_999_999, dims)]);
    assert_eq!(graph.reshape_due(100), Some(Reshape::BuildGraph));
    assert!(!graph.save_due());
    let built = graph
        .build_graph(&std::sync::atomic::AtomicBool::new(false))
        .expect("not stopped");
    graph.install(built);
    let shape = graph.shape();
    assert_eq!((shape.vectors, shape.tombstones), (1040 - 2 + 105, 0));
    assert_eq!(
        &*graph.search(&unit(9_999_999, dims), 1, |_| true)[0].0,
        "new.last"
    );
    assert!(
        graph
            .search(&unit(1, dims), 10, |t| t == "s.tool1")
            .is_empty()
    );
}
