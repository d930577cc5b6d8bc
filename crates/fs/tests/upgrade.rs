//! A store of format 3 (one journal file per generation, journal version 3, records framed
//! without a tag) is opened by this build: its journal is replayed, and the store becomes
//! the current format (two reused journal files since format 4) with the old journal file gone.

use scion_fs::journal::{Record, Target};
use scion_fs::{Fs, Kind, MountOptions, SetAttr, Ts};
use scion_store::{os_host, Superblock, SUPERBLOCK_FILE, SUPERBLOCK_SLOT};

#[test]
fn format_3_store_is_replayed_and_upgraded() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let host = os_host();
    Fs::create(&host, &store).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut fs = Fs::open(&store, MountOptions::new("test")).unwrap();
        let root = fs.root();
        let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        fs.write(f, 0, &data).unwrap();
        fs.close().unwrap();
    }

    // Make it what a format 3 build leaves after a crash: superblocks of version 3, and the
    // journal of the current generation in its own file, holding one change (a chmod).
    let sb = Superblock::read(&host, &store).unwrap();
    assert_eq!(sb.version, scion_store::FORMAT_VERSION);
    let path = store.join(SUPERBLOCK_FILE);
    let mut slots = std::fs::read(&path).unwrap();
    for slot in slots.chunks_mut(SUPERBLOCK_SLOT) {
        if &slot[..8] == b"SCIONSB\0" {
            slot[8..12].copy_from_slice(&3u32.to_le_bytes());
            let crc = crc32c::crc32c(&slot[..SUPERBLOCK_SLOT - 4]);
            slot[SUPERBLOCK_SLOT - 4..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    std::fs::write(&path, &slots).unwrap();
    for name in ["0.log", "1.log"] {
        std::fs::remove_file(store.join("journal").join(name)).unwrap();
    }
    let mut journal = Vec::new();
    journal.extend_from_slice(b"SCIONJL1");
    journal.extend_from_slice(&3u32.to_le_bytes());
    journal.extend_from_slice(&sb.generation.to_le_bytes());
    journal.extend_from_slice(&sb.store_id);
    let crc = crc32c::crc32c(&journal);
    journal.extend_from_slice(&crc.to_le_bytes());
    let rec = Record::SetAttr {
        ino: Target::Path {
            ns: 1,
            names: vec![b"f".to_vec()],
        },
        attr: SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
        time: Ts {
            sec: 1_700_000_000,
            nsec: 0,
        },
    }
    .encode();
    let len = (rec.len() as u32).to_le_bytes();
    journal.extend_from_slice(&len);
    journal.extend_from_slice(&crc32c::crc32c_append(crc32c::crc32c(&len), &rec).to_le_bytes());
    journal.extend_from_slice(&rec);
    let legacy = store.join("journal").join(format!("{:016x}.log", sb.generation));
    std::fs::write(&legacy, &journal).unwrap();
    assert_eq!(Superblock::read(&host, &store).unwrap().version, 3);

    // Opened by this build: replayed, upgraded, the old file gone.
    let mut fs = Fs::open(&store, MountOptions::new("test")).unwrap();
    let root = fs.root();
    let f = fs.lookup(root, b"f").unwrap().ino;
    assert_eq!(fs.getattr(f).unwrap().perm, 0o600, "the version 3 journal was replayed");
    assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
    fs.close().unwrap();
    assert_eq!(
        Superblock::read(&host, &store).unwrap().version,
        scion_store::FORMAT_VERSION
    );
    let mut names: Vec<String> = std::fs::read_dir(store.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["0.log", "1.log"]);
    let rep = scion_fs::check::check_committed(&host, &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
}
