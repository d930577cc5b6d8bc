//! fsyncs running without the engine lock, as the FUSE adapter runs them: several threads
//! write files (small ones journaled as bytes, large ones as blocks written ahead to a pack)
//! and sync in three steps (`sync_begin` under the lock, `SyncTicket::run` without it,
//! `sync_end` under it again), so one thread's disk work overlaps the others' writes and
//! syncs. On the simulated host, every power cut afterwards (keeping only what a sync covered)
//! must hold every file whose thread's sync had returned before the cut.

use scion_fs::{Fs, Kind, MountOptions, ROOT_INO};
use scion_store::host::{HostFile, HostFs, HostSpace, OpenMode};
use scion_store::sim::{crash_image, Fate, HostOp, SimHost};
use scion_store::Host;
use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

mod common;

const STORE: &str = "/store";
const THREADS: u64 = 3;
const FILES: u64 = 24;

fn opts(host: &SimHost) -> MountOptions {
    MountOptions {
        holder: "concurrent sync test".into(),
        host: Arc::new(host.clone()) as Host,
    }
}

/// The simulated host with fdatasyncs that take a while, as a disk's do, so that threads
/// write and sync while another's sync is under way.
struct SlowSync(SimHost);
struct SlowFile(Arc<dyn HostFile>);

impl HostFile for SlowFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        std::thread::sleep(std::time::Duration::from_micros(300));
        self.0.sync_data()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0.punch_hole(offset, len)
    }
}

impl HostFs for SlowSync {
    fn open(&self, p: &Path, m: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        Ok(Arc::new(SlowFile(self.0.open(p, m)?)))
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        self.0.remove_file(p)
    }
    fn list_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        self.0.list_dir(p)
    }
    fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        self.0.create_dir_all(p)
    }
    fn exists(&self, p: &Path) -> bool {
        self.0.exists(p)
    }
    fn sync_dir(&self, p: &Path) -> io::Result<()> {
        self.0.sync_dir(p)
    }
    fn allocated_bytes(&self, p: &Path) -> io::Result<u64> {
        self.0.allocated_bytes(p)
    }
    fn space(&self, p: &Path) -> io::Result<HostSpace> {
        self.0.space(p)
    }
    fn lock(&self, d: &Path, h: &str) -> scion_store::Result<Box<dyn Any + Send>> {
        self.0.lock(d, h)
    }
}

/// Content of file `i` of thread `t`: every third one spans whole 64 KiB chunks.
fn content(t: u64, i: u64) -> Vec<u8> {
    let len = if i % 3 == 0 {
        200_000
    } else {
        100 + (i as usize * 37) % 3000
    };
    (0..len).map(|k| (k as u64 * 31 + t * 7 + i) as u8).collect()
}

fn name(t: u64, i: u64) -> Vec<u8> {
    format!("t{t}-{i}").into_bytes()
}

fn sync_unlocked(fs: &Mutex<Fs>) {
    let ticket = fs.lock().unwrap().sync_begin(false).unwrap();
    let r = ticket.run();
    fs.lock().unwrap().sync_end(ticket, r).unwrap();
}

#[test]
fn syncs_without_the_lock_keep_what_they_acknowledged() {
    // Interleavings differ from run to run; several runs make a broken order show (a sync
    // that returned while a block its journal named was still being synced by another one
    // failed about every other run before syncs were ordered in the block store).
    for _ in 0..6 {
        one_run();
    }
}

fn one_run() {
    let host = SimHost::default();
    Fs::create(&(Arc::new(host.clone()) as Host), Path::new(STORE)).unwrap();
    let base = host.image();
    host.record();
    let slow = MountOptions {
        holder: "concurrent sync test".into(),
        host: Arc::new(SlowSync(host.clone())) as Host,
    };
    let fs = Arc::new(Mutex::new(Fs::open(Path::new(STORE), slow).unwrap()));
    // Marks in the log: thread t's files 0..=i were acknowledged durable at this point.
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, host) = (fs.clone(), host.clone());
            std::thread::spawn(move || {
                for i in 0..FILES {
                    {
                        let mut fs = fs.lock().unwrap();
                        let a = fs
                            .mknod(ROOT_INO, &name(t, i), Kind::File, 0o644, 0, 0, 0, 0, &[])
                            .unwrap();
                        fs.write(a.ino, 0, &content(t, i)).unwrap();
                    }
                    if i % 2 == 1 || i == FILES - 1 {
                        sync_unlocked(&fs);
                        host.mark((t << 32) | i);
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    drop(Arc::try_unwrap(fs).ok().expect("threads done").into_inner().unwrap()); // a crash
    let log = host.take_log();
    let marks: Vec<(usize, u64, u64)> = log
        .iter()
        .enumerate()
        .filter_map(|(at, op)| match op {
            HostOp::Mark(m) => Some((at, m >> 32, m & 0xffff_ffff)),
            _ => None,
        })
        .collect();
    assert_eq!(marks.len() as u64, THREADS * FILES / 2);
    // A cut just after each acknowledgement, and one at the very end; only synced operations
    // reach the disk.
    let mut cuts: Vec<usize> = marks.iter().map(|(at, _, _)| at + 1).collect();
    cuts.push(log.len());
    for cut in cuts {
        let img = crash_image(&base, &log, cut, |_, _| Fate::Lost);
        let host = SimHost::from_image(img);
        let mut fs =
            Fs::open(Path::new(STORE), opts(&host)).unwrap_or_else(|e| panic!("open after a cut at {cut}: {e}"));
        for t in 0..THREADS {
            let Some(acked) = marks
                .iter()
                .filter(|(at, mt, _)| *at < cut && *mt == t)
                .map(|(_, _, i)| *i)
                .max()
            else {
                continue;
            };
            for i in 0..=acked {
                let a = fs.lookup(ROOT_INO, &name(t, i)).unwrap_or_else(|e| {
                    panic!("cut at {cut}: thread {t}'s file {i}, acknowledged, is missing (errno {e})")
                });
                let want = content(t, i);
                assert_eq!(a.size, want.len() as u64, "cut at {cut}: size of thread {t}'s file {i}");
                let got = fs.read(a.ino, 0, want.len() as u32).unwrap();
                assert!(got == want, "cut at {cut}: content of thread {t}'s file {i}");
            }
        }
        fs.close().unwrap();
    }
}

/// A read planned under the engine lock and carried out without it, while the file is
/// deleted and a checkpoint frees and punches its blocks: the checkpoint waits for the read
/// (`ReadGate`) before punching, so the read gets the file's bytes, never zeros or EIO.
/// Removing the wait fails it (the read then finds a hole and gets EIO).
#[test]
fn reads_in_flight_finish_before_their_blocks_are_punched() {
    let (_tmp, _store, mut fs) = common::new_store();
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let data: Vec<u8> = (0..4 * 65536).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(f, 0, &data).unwrap();
    fs.checkpoint().unwrap();
    let fs = Arc::new(Mutex::new(fs));
    let plan = scion_fs::lock(&fs).read_plan(f, 0, data.len() as u32).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let deleter = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let mut fs = scion_fs::lock(&fs);
            fs.unlink(root, b"f").unwrap();
            fs.forget(f, u64::MAX);
            tx.send(()).unwrap();
            // Frees the file's blocks and punches them, once the read is done.
            fs.checkpoint().unwrap();
        })
    };
    rx.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        plan.execute().as_deref(),
        Ok(&data[..]),
        "a read in flight read its bytes"
    );
    deleter.join().unwrap();
}

/// An fsync whose records name no block written since the packs' last sync needs only the
/// journal, and goes on while another sync holds the packs (a checkpoint's, which writes out
/// its trees first, or one covering a bulk writer's pages); it used to wait for that one.
/// An fsync whose records name a block written since waits for it, and syncs the packs.
#[test]
fn an_fsync_of_journaled_bytes_does_not_wait_for_a_pack_sync() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let (_tmp, _store, fs) = common::new_store();
    let store = fs.block_store().clone();
    let fs = Arc::new(Mutex::new(fs));
    let sync = |fs: &Arc<Mutex<Fs>>, name: &'static str, len: usize| {
        let (fs, (tx, rx)) = (fs.clone(), channel());
        std::thread::spawn(move || {
            common::mkfile(&mut fs.lock().unwrap(), ROOT_INO, name, &vec![7u8; len]);
            let ticket = fs.lock().unwrap().sync_begin(true).unwrap();
            let r = ticket.run();
            fs.lock().unwrap().sync_end(ticket, r).unwrap();
            tx.send(()).unwrap();
        });
        rx
    };
    // A file whose bytes are journaled, synced once so that the packs are too.
    sync(&fs, "first", 100).recv().unwrap();
    assert!(store.synced_through(store.writes()));
    // A sync holding the packs until released.
    let (release, held) = channel::<()>();
    let (entered, in_sync) = channel::<()>();
    let holder = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.sync_then(&|| {
                entered.send(()).unwrap();
                held.recv().unwrap();
                Ok(())
            })
        })
    };
    in_sync.recv().unwrap();
    let small = sync(&fs, "small", 100);
    small
        .recv_timeout(Duration::from_secs(60))
        .expect("an fsync of bytes in the journal waited for the packs' sync");
    // 256 KiB: whole chunks written ahead to a pack, named by their record.
    let large = sync(&fs, "large", 256 << 10);
    assert!(large.recv_timeout(Duration::from_millis(300)).is_err(), "an fsync returned before the blocks it names were synced");
    assert!(!store.synced_through(store.writes()));
    release.send(()).unwrap();
    holder.join().unwrap().unwrap();
    large.recv().unwrap();
    assert!(store.synced_through(store.writes()));
}
