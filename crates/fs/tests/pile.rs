//! Changes left to pile up while nobody waited on a fold (`fold_policy`: folds early only
//! while someone would wait) are handed to the background when someone does, like any
//! backlog: the request that finds them folds, and leaves the pack sync and the commit. It
//! used to take the whole checkpoint, pack sync included, under the engine lock once sixteen
//! batches waited, which is meant for a commit stuck in flight (issue 38: a 14,000-inode
//! pile held every request 633 ms that way, 481 ms handed over). Its own test binary: the
//! fold batch it sets is the process's.

mod common;
use common::*;

const BATCH: usize = 16;

#[test]
fn a_pile_met_by_early_folds_is_handed_over_not_checkpointed_whole() {
    let (_tmp, store, mut fs) = new_store();
    fs.set_background_thread(Some(std::thread::current()));
    let root = fs.root();
    // Nobody waits: no early folds, the changes pile up past sixteen batches.
    scion_fs::set_fold_batch(0);
    let piled = 20 * BATCH;
    for n in 0..piled {
        mkfile(&mut fs, root, &format!("f{n}"), format!("file {n}").as_bytes());
    }
    assert!(fs.take_handoff().is_none(), "no fold while nobody waits");
    // Someone waits now: the next request finds the pile.
    scion_fs::set_fold_batch(BATCH);
    mkfile(&mut fs, root, &format!("f{piled}"), format!("file {piled}").as_bytes());
    let sync = fs.take_handoff().expect("the pile was folded and its commit handed over");
    let r = sync.run();
    fs.checkpoint_end(sync, r).unwrap();
    fs.close().unwrap();
    let mut fs = open(&store);
    for n in 0..=piled {
        let i = lookup(&mut fs, root, &format!("f{n}")).unwrap_or_else(|e| panic!("f{n}: {e:?}"));
        assert_eq!(read_all(&mut fs, i), format!("file {n}").as_bytes());
    }
    fs.close().unwrap();
    committed(&store);
}
