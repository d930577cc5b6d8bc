//! A request that finds the background behind on small folds (`fold_policy`: more than four
//! batches waiting) folds and writes them itself, and hands the pack sync and the commit to
//! the background (`Fs::take_handoff`), so that no request waits on the disk for it
//! (issue 38). Its own test binary: the fold batch it sets is the process's.

mod common;
use common::*;
use scion_fs::Fs;

const BATCH: usize = 16;

/// A new store whose background is this thread: it takes what a request hands over.
fn store_with_background() -> (tempfile::TempDir, std::path::PathBuf, Fs) {
    let (tmp, store, mut fs) = new_store();
    fs.set_background_thread(Some(std::thread::current()));
    (tmp, store, fs)
}

/// Makes files until more than four batches of inodes wait (the files and their
/// directory), so that the last request folded them for the background; returns how many.
fn make_until_handed_off(fs: &mut Fs, dir: u64) -> usize {
    let made = 4 * BATCH + 1;
    for n in 0..made {
        mkfile(fs, dir, &format!("f{n}"), format!("file {n}").as_bytes());
    }
    made
}

fn check_files(store: &std::path::Path, names: std::ops::Range<usize>) {
    let mut fs = open(store);
    let root = fs.root();
    for n in names {
        let i = lookup(&mut fs, root, &format!("f{n}")).unwrap_or_else(|e| panic!("f{n}: {e:?}"));
        assert_eq!(read_all(&mut fs, i), format!("file {n}").as_bytes());
    }
    fs.close().unwrap();
    committed(store);
}

#[test]
fn a_request_folds_and_hands_the_commit_to_the_background() {
    scion_fs::set_fold_batch(BATCH);
    for crash_before_commit in [false, true] {
        let (_tmp, store, mut fs) = store_with_background();
        let root = fs.root();
        let made = make_until_handed_off(&mut fs, root);
        let sync = fs.take_handoff().expect("a request folded and left the commit");
        assert!(fs.take_handoff().is_none(), "handed over once");
        // While it is in flight, requests are served and fold nothing more, however many.
        for n in made..made + 6 * BATCH {
            mkfile(&mut fs, root, &format!("f{n}"), format!("file {n}").as_bytes());
        }
        assert!(fs.take_handoff().is_none(), "no second fold while a commit is in flight");
        // An fsync meanwhile: everything above is durable, committed or not.
        fsync(&mut fs);
        if !crash_before_commit {
            let r = sync.run();
            fs.checkpoint_end(sync, r).unwrap();
            assert!(fs.has_changes(), "what came after the fold waits for the next checkpoint");
        }
        drop(fs); // a crash
        committed(&store);
        check_files(&store, 0..made + 6 * BATCH);
    }
}

/// A checkpoint taken before the background comes commits the handed-over one first; the
/// background then finds nothing to commit, whether it had taken the hand-off already (its
/// `checkpoint_end` does nothing) or not (`take_handoff` gives nothing).
#[test]
fn a_checkpoint_commits_a_handed_over_one_first() {
    scion_fs::set_fold_batch(BATCH);
    for taken_first in [true, false] {
        let (_tmp, store, mut fs) = store_with_background();
        let root = fs.root();
        let made = make_until_handed_off(&mut fs, root);
        let sync = if taken_first { Some(fs.take_handoff().expect("handed over")) } else { None };
        fs.checkpoint().unwrap();
        assert!(fs.take_handoff().is_none(), "committed by the checkpoint");
        if let Some(sync) = sync {
            let r = sync.run();
            fs.checkpoint_end(sync, r).unwrap();
        }
        assert!(!fs.has_changes());
        drop(fs);
        committed(&store);
        check_files(&store, 0..made);
    }
}

/// Far behind (`BEHIND_MAX`, 16 batches, waiting while the commit handed over is still not
/// done, as when its pack sync is stuck on a busy disk), a request takes the whole
/// checkpoint: the one in flight committed first, then everything made so far, durable
/// without an fsync.
#[test]
fn far_behind_a_request_takes_the_whole_checkpoint() {
    scion_fs::set_fold_batch(BATCH);
    let (_tmp, store, mut fs) = store_with_background();
    let root = fs.root();
    let made = make_until_handed_off(&mut fs, root);
    let more = 16 * BATCH;
    for n in made..made + more {
        mkfile(&mut fs, root, &format!("f{n}"), format!("file {n}").as_bytes());
    }
    assert!(fs.take_handoff().is_none(), "committed by a request's checkpoint");
    drop(fs); // a crash, with no fsync
    committed(&store);
    check_files(&store, 0..made + more - 1);
}
