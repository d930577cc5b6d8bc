//! The `scion` command line: thin wrappers over scion-fs and scion-fuse.
// (serde_json's `json!` of the status report nests deeper than the default allows.)
#![recursion_limit = "256"]

mod alloc;
mod control;
mod copy;
mod cube_cmd;
mod diff_cmd;
mod fstab;
mod mount;
mod meta;
mod mirror_cmd;
mod receive_cmd;
mod remote_cmd;
mod run_cmd;
mod scan_cmd;
mod send_cmd;
mod serve_cmd;
mod status_cmd;
mod tree_cmds;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOC: alloc::Alloc = alloc::Alloc;

/// True if `name` is one of scion's commands (`alloc.rs` asks before `main`; allocates
/// nothing).
pub(crate) fn is_command(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(|n| n == "help" || Cmd::has_subcommand(n))
}

/// Freed memory goes back to the system at once (issue 39). mimalloc purges a thread's empty
/// pages later, when that thread next allocates; the FUSE workers that freed a walk's inodes
/// (on FORGET) then sit idle, and the daemon kept ~200 MB per 100,000 files forgotten.
/// Called first thing in the daemon, before its threads start (mimalloc's options are not
/// thread safe).
pub(crate) fn return_freed_memory() {
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15; // mimalloc.h, v3
    if alloc::is_mimalloc() {
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}
use std::path::PathBuf;
use scion::client::humane;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "scion", version, about = "A copy-on-write filesystem served through FUSE")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// `scion clone`'s arguments (a struct of their own, so that `quick_parse` can build them alone).
#[derive(clap::Args)]
struct CloneArgs {
    /// Directory to clone (in a scion mount, or a store path with --store).
    src: Option<PathBuf>,
    /// New directory on the same mount.
    dst: Option<PathBuf>,
    /// Leave this path (inside SRC; relative paths are taken from SRC) out of the clone.
    #[arg(long)]
    exclude: Vec<PathBuf>,
    /// TOML file naming source, destination and exclusions (README, "Clones and
    /// snapshots", shows one).
    #[arg(long)]
    template: Option<PathBuf>,
    /// Work on this unmounted store; paths are then store paths ("/a/b").
    #[arg(long)]
    store: Option<PathBuf>,
}

/// The command line of a clone, parsed without building every other command's arguments
/// and help (issue 38 item 3: clap copies every command's help text at each start, a
/// tenth of what starting `scion clone` costs). None: the full parser decides (help,
/// mistakes, every other command), so what users see is the same either way.
fn quick_parse(args: &[std::ffi::OsString]) -> Option<Cli> {
    use clap::{Args, FromArgMatches};
    if args.get(1).is_none_or(|a| a != "clone") || args.iter().any(|a| a == "-h" || a == "--help") {
        return None;
    }
    let cmd = clap::Command::new("scion").subcommand(CloneArgs::augment_args(clap::Command::new("clone")));
    let m = cmd.try_get_matches_from(args).ok()?;
    Cli::from_arg_matches(&m).ok()
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a new store in STORE (a new or empty directory on any filesystem).
    Init {
        /// A new or empty directory, on any filesystem, to hold the store.
        store: PathBuf,
    },
    /// Mount a store; runs in the background unless --foreground.
    Mount {
        /// The store's directory (made by `scion init`).
        store: PathBuf,
        /// The directory to show the store's files at (usually empty: what it holds is
        /// hidden while the store is mounted there, as with any mount).
        mountpoint: PathBuf,
        /// Stay attached to the terminal instead of running in the background.
        #[arg(long, short = 'f')]
        foreground: bool,
        /// Print nothing on success (as mount(8)'s helpers are; the helper forms set it).
        #[arg(long, short = 'q')]
        quiet: bool,
        /// Mount options, comma separated: the kernel's (ro, noexec, nosuid, nodev,
        /// allow_other, ...) and scion's own: snapdir=hidden|visible (list `.snapshot` in
        /// directories), uring=auto|off (FUSE over io_uring when the kernel offers it),
        /// repack=idle|off (put scattered files back together when idle),
        /// compress_old=idle|off (compress blocks only snapshots hold when idle),
        /// cache=writeback|writethrough (the kernel's cache of written data),
        /// users=on|off (on root's mount for everyone, other users' own snapshots, clones,
        /// restores and the like through scion's commands), node_cache=SIZE (the memory
        /// each volume's cache of metadata may take: bytes or K, M, G; default 64M;
        /// `scion status` shows its use), hash_memo=N (tree hashes each volume keeps for
        /// diff, send and receive; default 1048576), fold_batch=N (a checkpoint as soon as
        /// N changed inodes wait, or fewer where folds cost more, keeping each one's pause
        /// short; 0: only every 30 s or 256 MiB; default 1024), remote_cache=SIZE (the local cache of blocks of trees
        /// pulled from remotes: bytes or K, M, G; default 1G), dirty_max=SIZE (written
        /// data the kernel may cache for the mount before writers wait for its write-back,
        /// set when mounted as root; default 256M; 0: the kernel's own limits), nfs=ADDR:PORT (serve NFSv3 from the daemon too, as `scion
        /// serve nfs` does; with nfs_squash=root|all|none, nfs_anon=UID:GID,
        /// nfs_access=rw|ro and nfs_max_held=N). With `remount` (what
        /// `mount -o remount,...` runs): the kernel's flags of the mount at MOUNTPOINT change
        /// in place, ro and rw included; scion's own options stay as mounted.
        #[arg(short = 'o', value_delimiter = ',')]
        options: Vec<String>,
    },
    /// Unmount a scion mount, flush it and wait for its daemon to finish.
    Umount {
        /// Where a store is mounted.
        mountpoint: PathBuf,
    },
    /// Verify an unmounted store: checksums, reachability, reference counts, invariants.
    Check {
        /// The store's directory (not mounted: check takes the store's lock).
        store: PathBuf,
        /// The report as one JSON object (documented in the README).
        #[arg(long)]
        json: bool,
        /// Check only this cube (its path from the store's root): its own store, in time
        /// proportional to the cube. Without it, the store and then each of its cubes.
        #[arg(long)]
        cube: Option<PathBuf>,
        /// Remove the files whose data cannot be read (naming each), so the store (or the
        /// cube, with --cube) is consistent again, then check it. Damage to directories or
        /// tree nodes, and what snapshots hold, is named and left. Exit 0: clean after it.
        #[arg(long)]
        repair: bool,
    },
    /// Clone a directory: a writable copy, as if by `cp -a`, made in constant time.
    Clone(CloneArgs),
    /// Take a read-only snapshot of a directory, seen in DIR/.snapshot/NAME; or
    /// `snapshot schedule` to take them on a schedule.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Snapshot {
        #[command(subcommand)]
        sub: Option<SnapshotCmd>,
        /// The directory to snapshot.
        #[arg(required = true)]
        path: Option<PathBuf>,
        /// Snapshot name (default: the UTC time).
        #[arg(long)]
        name: Option<String>,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Destroy a clone or snapshot (a path, or @ID as `scion list` shows), freeing what only it held.
    Destroy {
        /// The clone's directory, `DIR/.snapshot/NAME`, or `@ID` as `scion list` shows it.
        path: PathBuf,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
        /// Also destroy the clones and snapshots it holds (clones inside it, snapshots of its
        /// directories); without it such a destroy is refused, naming them.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// With `@ID`: the mount it is in (any path in it; default: the current directory).
        #[arg(long, value_name = "PATH")]
        mount: Option<PathBuf>,
    },
    /// Read every live block (mounted: through the daemon; or an unmounted STORE) and name
    /// damaged files by path; exits 1 on damage.
    Scrub {
        /// A scion mount point (or any path in it), or with --store nothing.
        path: Option<PathBuf>,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
        /// The report as one JSON object: {"blocks", "bytes", "damaged_total", "damage":
        /// [{"path", "error"}]}.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite scattered files below a directory back to back (blocks shared with clones and
    /// snapshots stay where they are); the daemon also does it by itself when idle.
    Repack {
        /// A directory in a scion mount (default: the current directory), or with --store a
        /// path inside the store.
        path: Option<PathBuf>,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
        /// Stop after moving about this many MiB.
        #[arg(long, default_value_t = 1 << 20)]
        budget_mib: u64,
    },
    /// Compress old versions now: blocks that only snapshots hold (no live file) are
    /// recompressed with zstd and kept where they shrink by an eighth; the daemon also does
    /// it by itself when idle (`-o compress_old=off` leaves it to this command). Progress on
    /// stderr. Exit 0: done (or nothing to do); 2: failure.
    Compress {
        /// A scion mount point (or any path in it; the whole store is done), or with --store
        /// nothing.
        path: Option<PathBuf>,
        /// Work on the unmounted store in this directory.
        #[arg(long)]
        store: Option<PathBuf>,
        /// zstd level, 1 to 22 (default 19: slow, once per block).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=22))]
        level: Option<u8>,
        /// Stop after compressing about this many MiB of blocks (default: all of them).
        #[arg(long)]
        budget_mib: Option<u64>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Progress on stderr even when it is not a terminal.
        #[arg(long)]
        progress: bool,
    },
    /// Every distinct version of a file or directory across the snapshots that hold its path
    /// (of any directory above it) and the live one, oldest first; decided from stored
    /// records, never by reading file data. Exit 0: listed; 1: nothing holds it (or nothing
    /// was deleted); 2: bad usage or failure.
    Versions {
        /// A path in a scion mount (it may be gone from the live tree), or a store path with
        /// --store.
        path: PathBuf,
        /// List what snapshots of directory PATH hold that it no longer does, each with the
        /// newest snapshot holding it.
        #[arg(long)]
        deleted: bool,
        /// JSON Lines: {"snapshots", "live", "size", "mtime", "kind"} per version, oldest first
        /// (with --deleted: {"path", "snapshot", "kind"}).
        #[arg(long)]
        json: bool,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Put a file or directory back as a snapshot held it, sharing the snapshot's blocks (no
    /// data copied); what is there now is kept beside it as PATH.scion-restore-<time> unless
    /// --replace. Exit 0: restored; 2: bad usage or failure.
    Restore {
        /// The file or directory (it may be gone from the live tree).
        path: PathBuf,
        /// A snapshot name (in .snapshot of PATH's directory or of one above it), or a path
        /// into a snapshot.
        #[arg(long)]
        from: String,
        /// Restore to this new path instead of PATH.
        #[arg(long)]
        to: Option<PathBuf>,
        /// Remove what is at the destination instead of keeping it beside.
        #[arg(long)]
        replace: bool,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Make a directory exactly one of its snapshots again
    ///
    /// Make a clone exactly one of its snapshots again, in one step whatever its size (ZFS
    /// rollback). The clone's files become new files: a process holding one open keeps what
    /// it opened, as after a rename over it. Every snapshot of the clone stays. Another
    /// directory is restored in place (`scion restore DIR --from SNAP --replace`): in time
    /// with its size, all or nothing, its snapshots kept.
    /// Exit 0: rolled back; 1: no such snapshot; 2: bad usage or failure.
    Rollback {
        /// The directory (a clone's top, or any directory).
        dir: PathBuf,
        /// A snapshot of it: a name in DIR/.snapshot.
        #[arg(long)]
        to: String,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// What differs between two directories (or two files) of one store
    ///
    /// What differs between two directories (or two files) of one store: clones, their
    /// sources, snapshots, the live tree, any two. Shared subtrees are skipped unread and
    /// files compared by their blocks' hashes, so it costs what differs, not the trees' size;
    /// changes not yet checkpointed are included. One line per change, sorted: `A path`
    /// added, `D` deleted, `M` content, `m` metadata only (mode, owner, xattrs; times with
    /// --metadata), `T` kind changed, `R OLD NEW` a file or symlink moved (the same object
    /// with the same content); an added or deleted directory is one line unless
    /// --recursive. Exit 0: no differences; 1: differences; 2: trouble.
    Diff {
        a: PathBuf,
        b: PathBuf,
        /// JSON Lines: {"change": "added|deleted|modified|metadata|type|renamed", "path",
        /// "kind"} ("old_path" for a rename; with --stat also "old_size", "new_size").
        #[arg(long)]
        json: bool,
        /// A summary: counts per kind of change and the files' sizes before and after.
        #[arg(long)]
        stat: bool,
        /// List everything inside an added or deleted directory.
        #[arg(long)]
        recursive: bool,
        /// Compare modification times too.
        #[arg(long)]
        metadata: bool,
        /// Show a moved file as deleted and added, not as `R OLD NEW`.
        #[arg(long)]
        no_renames: bool,
        /// After the list, a unified diff of each changed file (through the mount, by
        /// `diff -u`; binary files are named, as git does).
        #[arg(long, conflicts_with = "json")]
        patch: bool,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Run COMMAND in a throwaway clone of SRC and list what it changed
    ///
    /// COMMAND runs in a throwaway clone of SRC (working directory: the clone; as you), then
    /// scion lists what it changed there as `scion diff` does and destroy the clone (`--keep` keeps
    /// it). SRC is not touched, unless --apply. Exit status: COMMAND's (128 + signal), 2 if
    /// scion failed or did not apply.
    Run {
        /// The directory to try COMMAND on (in a scion mount).
        src: PathBuf,
        /// Keep the clone, and print where it is.
        #[arg(long, conflicts_with = "apply")]
        keep: bool,
        /// If COMMAND exits 0, put its changes into SRC, each file replaced at once (a copy
        /// sharing the clone's blocks, renamed into place). Refused, the clone kept, if SRC
        /// changed meanwhile where COMMAND changed it (or COMMAND failed).
        #[arg(long)]
        apply: bool,
        /// Run COMMAND through bwrap in a new mount namespace: the clone as its root
        /// directory if SRC is a root filesystem (holds usr and etc), otherwise as the only
        /// writable directory; /proc, /dev and an empty /tmp as usual; with your rights.
        #[arg(long)]
        sandbox: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run COMMAND once per distinct file content below the PATHs, reporting every path
    ///
    /// COMMAND runs once per distinct file content below the PATHs (clones, snapshots, any
    /// directories of one mount), in parallel, and its result is reported for every path that
    /// holds that content: `scion scan /srv/vm* -- clamscan --no-summary {}`. Contents are
    /// told apart by block hashes, without reading data; `{}` is one path holding the
    /// content (the path goes last if COMMAND has no `{}`). Ending COMMAND with `{} +` (as
    /// `find -exec` does) gives it up to 256 paths per run: each output line goes to the path
    /// it names, and each file's status is its batch's (kept only when the batch exits 0). Each file's result is shown as if
    /// COMMAND had run on it: the path it ran on is replaced by the file's in its output;
    /// output that names no path gets `PATH: ` before each line. Results are kept in the
    /// store per command line and content, so a second scan runs only on what changed.
    /// Exit 0: every run exited 0; 1: some did not; 2: trouble (a directory you may not
    /// read, a command that does not start).
    Scan {
        /// The directories to scan (in one scion mount).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only files whose content differs from this snapshot (a name in each PATH's
        /// .snapshot or a parent's, or the path of a snapshot directory).
        #[arg(long)]
        since: Option<String>,
        /// Runs at once (default: the number of CPUs).
        #[arg(long)]
        jobs: Option<usize>,
        /// JSON Lines, one per file: {"path", "content", "size", "status", "stdout",
        /// "stderr", "cached", "ran_on"}.
        #[arg(long)]
        json: bool,
        /// Run on every content, neither using nor keeping results kept for this command.
        #[arg(long)]
        no_cache: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Write a stream of a tree, whole or what changed from a base
    ///
    /// Writes to stdout (or -o FILE) a stream of the snapshot, clone or directory PATH (a
    /// snapshot is taken for the send if PATH is not one). With --base, a snapshot or clone the
    /// receiving store also holds, only what changed from it: changed chunks, small writes as
    /// their patches, moved files as copies. The base is named by its content hash, so any
    /// store holding an identical tree can take the stream, and no other. zstd-compressed
    /// unless --no-compress; progress on stderr on a terminal or with --progress.
    /// Exit 0: sent; 2: trouble.
    Send {
        path: PathBuf,
        /// A snapshot or clone the receiver holds (by content): send only what differs.
        #[arg(long)]
        base: Option<PathBuf>,
        /// Write the stream to FILE instead of stdout.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        #[arg(long)]
        no_compress: bool,
        #[arg(long)]
        progress: bool,
        /// Send only what a receive that stopped short lacks (the token it printed); PATH
        /// must be the snapshot sent the first time.
        #[arg(long)]
        resume: Option<String>,
        /// Run CMD (a shell command line that receives, such as `ssh host scion receive
        /// /mnt/x`) with the stream on its stdin, its stdout shown here: a two-way channel.
        #[arg(long, value_name = "CMD")]
        through: Option<String>,
        /// Over --through, ask the receiver first which blocks it holds (anywhere in its
        /// store, by BLAKE3 hash) and send those as their hashes, not their bytes: a second
        /// send of a tree the receiver got by any route moves almost nothing.
        #[arg(long, requires = "through")]
        dedup: bool,
    },
    /// Make the tree a `scion send` stream holds appear as the new directory DIR
    ///
    /// Reads the stream from stdin (or -i FILE) and builds its tree beside DIR under a hidden
    /// name: empty for a full stream, or a clone of the base, found in this store by its
    /// content hash (a snapshot or clone, however it got here). Every frame is checked; at the
    /// end the tree's content hash must be the sender's. Then it is renamed to DIR at once and
    /// snapshotted under the sent snapshot's name (the base for the next increment). A stream
    /// from `scion send --dedup --through` offers its blocks first: the answer (which of them
    /// this store holds) goes to stdout, back to the sender. Exit 0: received; 1: refused (a
    /// damaged or cut stream, no base here): nothing is left behind; 2: bad arguments.
    Receive {
        dir: PathBuf,
        /// Read the stream from FILE instead of stdin.
        #[arg(short = 'i', long = "input")]
        input: Option<PathBuf>,
        #[arg(long)]
        progress: bool,
        /// If the stream stops short (a cut connection, a killed sender), keep what arrived
        /// (hidden beside DIR) and print a token: `scion send SNAPSHOT --resume TOKEN` then
        /// sends only the rest, to `scion receive DIR --resume`.
        #[arg(short = 's', long, conflicts_with_all = ["resume", "abort"])]
        resumable: bool,
        /// Go on with a receive of DIR that stopped short, from a `scion send --resume` stream.
        #[arg(long, conflicts_with = "abort")]
        resume: bool,
        /// Remove what a receive of DIR that stopped short kept, and what receives of DIR
        /// that were killed left beside it (their hidden trees and held bases).
        #[arg(long)]
        abort: bool,
        /// Receive into this store; DIR is a path in it. A store that is not mounted is
        /// mounted for the receive (at a private directory) and unmounted, flushed, after it.
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Send a directory's snapshots to a second store as they are taken (by hand or by a
    /// schedule), each as an increment on the one before; the daemon does it, resuming after
    /// interruptions and restarts. Exit 0: done; 1: --remove of a mirror that is not there;
    /// 2: bad usage or failure.
    Mirror {
        #[command(subcommand)]
        cmd: MirrorCmd,
    },
    /// Object stores (S3 API: AWS S3, MinIO, Ceph RGW, Garage, R2) a store reaches by name,
    /// kept in the store without credentials (those come to its daemon the standard AWS
    /// ways). Exit 0: done; 1: remove of a remote that is not there; 2: bad usage or failure.
    Remote {
        #[command(subcommand)]
        cmd: RemoteCmd,
    },
    /// Publish SNAPSHOT (DIR/.snapshot/NAME) on remote REMOTE as the next version of --name:
    /// packs of the blocks the remote lacks, the tree, then its manifest, last. A cut push
    /// leaves the remote as it was (run it again: it sends only the rest). Progress on a
    /// terminal. Exit 0: pushed; 2: bad usage or failure.
    Push {
        snapshot: PathBuf,
        remote: String,
        /// What the tree is published as: 1 to 128 letters, digits, '.', '_' or '-'.
        #[arg(long)]
        name: String,
        /// One JSON object: {"remote", "name", "version", "root", "tree", "blocks",
        /// "new_blocks", "new_bytes", "sent_bytes", "objects", "known_packs", "seconds"}.
        #[arg(long)]
        json: bool,
    },
    /// Attach the tree published as NAME on REMOTE at DIR (a new path in a mount whose store
    /// has REMOTE), without downloading it: blocks are fetched when first read, verified, and
    /// kept in a bounded cache (`-o remote_cache=SIZE`, 1G by default); the tree is
    /// snapshotted under the name it was pushed from (DIR/.snapshot/NAME), a base to clone.
    /// Exit 0: attached; 2: bad usage or failure (nothing is left at DIR).
    Pull {
        remote: String,
        name: String,
        dir: PathBuf,
        /// A version to pull (default: the newest).
        #[arg(long)]
        version: Option<u64>,
        /// Fetch every block now (with progress), not when first read.
        #[arg(long)]
        prefetch: bool,
        /// One JSON object: {"dir", "remote", "name", "version", "root", "blocks",
        /// "snapshot", "seconds", "prefetched_bytes"}.
        #[arg(long)]
        json: bool,
    },
    /// Cubes: directories that are stores of their own (own packs, journal, checkpoints),
    /// so that an fsync in one never waits for another's data and a failure in one leaves
    /// the rest of the mount untouched. Exit 0: done; 2: bad usage or failure.
    Cube {
        #[command(subcommand)]
        cmd: CubeCmd,
    },
    /// Serve a mount (or a store that is not mounted) to other machines: `scion serve nfs`.
    /// Exit 0: serving (or stopped); 2: bad usage or failure.
    Serve {
        #[command(subcommand)]
        cmd: ServeCmd,
    },
    /// The state of each scion mount (or of the one PATH is in, or of an unmounted store):
    /// store, daemon pid and uptime, space (host free, packs, what only snapshots hold, old
    /// versions compressed), clones, snapshots, schedules, mirrors, the last checkpoint, the
    /// journal, background work, bytes written, memory, how long the engine lock was held (the
    /// longest holds, with where in the source they were taken: what every request waited
    /// for), and whether the store failed. Exit 0; 2 if one could not be asked.
    Status {
        path: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
        /// One JSON object per store: {"mountpoint", "store", "pid", "uptime_s", "host_total",
        /// "host_free", "pack_bytes", "snapshots_only_bytes", "compressed_blocks",
        /// "compressed_bytes", "clones", "snapshots", "schedules", "mirrors",
        /// "mirrors_failing", "cubes", "cubes_failing", "generation", "checkpoint_age_s", "journal_bytes",
        /// "dirty_bytes", "unpunched_blocks", "repack_age_s", "compress_age_s", "failed", "host_full"}.
        #[arg(long)]
        json: bool,
    },
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell) for
    /// scion: `scion completions bash > /etc/bash_completion.d/scion`.
    Completions {
        shell: clap_complete::Shell,
    },
    /// Write the man pages of scion and of each of its commands (scion.1, scion-mount.1, ...)
    /// into DIR, made from the same definitions as --help.
    Man {
        dir: PathBuf,
    },
    /// List clones and snapshots with their space: REFER (reachable) and USED (only theirs).
    List {
        /// Any path in the mount (default: the current directory).
        path: Option<PathBuf>,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
        /// JSON Lines: {"kind", "id", "path", "origin", "created", "scheduled", "orphaned",
        /// "refer", "used", "stored", "clones"}.
        #[arg(long)]
        json: bool,
        /// For scripts: no header, fields separated by one tab.
        #[arg(short = 'H')]
        scripted: bool,
        /// Only snapshots whose directory is gone (removed with `rm -rf`): they still hold
        /// their space until `scion destroy @ID`, and are browsed as .snapshot/@ID of the
        /// root (PATH shows where; root and the directory's owner may enter).
        #[arg(long)]
        orphaned: bool,
        /// Exact numbers: bytes, and times in seconds since the epoch.
        #[arg(short = 'p')]
        exact: bool,
    },
}

#[derive(Subcommand)]
enum ServeCmd {
    /// Serve NFSv3 (MOUNT and NFS on the one TCP port, no rpcbind needed) from the daemon of
    /// the mount PATH is in, and return once it listens: PATH (or each --export) is
    /// exported under its path in the mount, read by a client as
    /// nfs://HOST/PATH?nfsport=PORT&mountport=PORT, or mounted by a Linux client with
    /// `mount -t nfs -o vers=3,tcp,port=PORT,mountport=PORT,nolock HOST:/PATH DIR`. COMMIT and
    /// stable writes are fsyncs; permissions are checked as through the mount, for the
    /// client's AUTH_SYS uid and groups (believed as the client states them: listen only
    /// where trusted hosts reach). With --store STORE, a store that is not mounted is served
    /// in the foreground until Ctrl-C or SIGTERM (paths are then paths inside the store).
    Nfs {
        /// A directory in a scion mount (its root by default is what a mount point names).
        path: Option<PathBuf>,
        /// Serve this unmounted store, in the foreground.
        #[arg(long)]
        store: Option<PathBuf>,
        /// ADDR:PORT to listen on (0 as the port: any free one, printed).
        #[arg(long, default_value = "127.0.0.1:2049")]
        listen: String,
        /// A directory to export instead of PATH (repeat for several); clients mount it or a
        /// directory below it, and `..` stops at it.
        #[arg(long)]
        export: Vec<PathBuf>,
        /// A directory in which every change is refused (NFS3ERR_ROFS), itself and all below
        /// it (repeat for several); the whole export with --read-only PATH.
        #[arg(long)]
        read_only: Vec<PathBuf>,
        /// Whose identity is replaced by --anon's: root (root's, as knfsd's root_squash),
        /// all, or none.
        #[arg(long, default_value = "root")]
        squash: String,
        /// The identity squashed callers get, and calls without AUTH_SYS.
        #[arg(long, default_value = "65534:65534")]
        anon: String,
        /// Inodes the server keeps loaded for its clients at most (64 to 16777216; default
        /// 65536, about 64 MB): past it the oldest are given back at each sweep and found
        /// again by number when a client uses them.
        #[arg(long, value_name = "N")]
        max_held: Option<String>,
        /// Stop the mount's NFS server.
        #[arg(long)]
        stop: bool,
    },
}

#[derive(Subcommand)]
enum CubeCmd {
    /// Make the new directory DIR (in a scion mount, its parent in the store's main tree) a
    /// cube.
    Create {
        dir: PathBuf,
        /// ordered (fsync makes everything before it durable; the default), data (as
        /// ordered, file data journaled with the metadata instead of written ahead to the
        /// packs), nofsync (fsync returns at once: a crash may lose what came after the
        /// cube's last sync or checkpoint, never older data), writeback (metadata journaled
        /// without waiting for the data: after a crash, bytes written since a file's last
        /// fsync may be older ones; fsync syncs both) or nojournal (nothing journaled:
        /// changes reach the disk at the cube's checkpoints, and fsync takes one).
        #[arg(long, default_value = "ordered")]
        mode: String,
        /// What a failure inside the cube (a bad checksum, a failed host I/O) does to it:
        /// readonly (reads go on, changes get EROFS; the default) or fence (every access
        /// gets EIO). The rest of the mount goes on either way.
        #[arg(long, default_value = "readonly")]
        on_error: String,
        /// DIR exists: make it a cube, copying what it holds into the cube (progress on
        /// stderr); its snapshots stay in the store, orphaned (`scion list --orphaned`).
        #[arg(long)]
        convert: bool,
        /// Progress on stderr even when it is not a terminal.
        #[arg(long)]
        progress: bool,
    },
    /// Make a cube an ordinary directory again: what it holds is copied back into the
    /// store's main tree (progress on stderr), then the cube and its store go (its snapshots
    /// with it: send them first to keep them).
    Remove {
        dir: PathBuf,
        /// Progress on stderr even when it is not a terminal.
        #[arg(long)]
        progress: bool,
    },
    /// Change a cube's mode or failure policy, from the next request on.
    Set {
        dir: PathBuf,
        #[arg(long)]
        mode: Option<String>,
        #[arg(long)]
        on_error: Option<String>,
    },
    /// Every cube of the mount PATH is in: id, mode, policy, state (ok, read-only, fenced,
    /// unavailable), space its store takes, path.
    List {
        path: Option<PathBuf>,
        /// JSON Lines: {"path", "id", "mode", "on_error", "state", "why", "used"}.
        #[arg(long)]
        json: bool,
        /// For scripts: no header, fields separated by one tab (no "why" lines).
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact numbers: bytes.
        #[arg(short = 'p')]
        exact: bool,
    },
    /// Serve a failed cube again, from its store as the disk holds it (once the failure has
    /// passed, or after a repair), without a remount.
    Recover { dir: PathBuf },
    /// Check a cube of a mounted store while the rest of the mount serves: the cube is
    /// fenced (EIO) while its store is checked, then served again from its store (files it
    /// had open get ESTALE). Exit 0: clean; 1: damaged; 2: failure. (`scion check STORE
    /// --cube PATH` checks one of an unmounted store.)
    Check {
        dir: PathBuf,
        /// The report as one JSON object, as `scion check --json` prints it.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RemoteCmd {
    /// Add remote NAME: s3://BUCKET or s3://BUCKET/PREFIX (the store's objects go below
    /// PREFIX). A remote of that name is refused: remove it first.
    Add {
        /// 1 to 64 letters, digits, '.', '_' or '-'.
        name: String,
        /// s3://BUCKET[/PREFIX].
        url: String,
        /// The S3 API's URL (MinIO, Ceph RGW, Garage, R2...); default: AWS's for the region.
        #[arg(long)]
        endpoint: Option<String>,
        /// The region (default: the daemon's AWS_REGION or profile).
        #[arg(long)]
        region: Option<String>,
        /// A path in the scion mount whose store keeps the remote (default: the current
        /// directory).
        #[arg(long, conflicts_with = "store")]
        mount: Option<PathBuf>,
        /// Work on the unmounted store in this directory.
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// The store's remotes: name, URL, region, endpoint.
    List {
        /// JSON Lines: {"name", "url", "bucket", "prefix", "endpoint", "region"}.
        #[arg(long)]
        json: bool,
        #[arg(long, conflicts_with = "store")]
        mount: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Remove remote NAME from the store (what was pushed to it stays in the object store).
    Remove {
        name: String,
        #[arg(long, conflicts_with = "store")]
        mount: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Remove from remote NAME the packs and trees no published version needs (every
    /// version of every name stays), if older than --grace: safe beside other hosts reading
    /// and pushing. Through the daemon of the mount holding the current directory (or
    /// --mount), with its credentials.
    Gc {
        name: String,
        /// Objects younger than this stay (a push under way is making them): 90s, 15m, 2h,
        /// 7d, or 0.
        #[arg(long, default_value = "1d")]
        grace: String,
        /// Say what would go; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object: {"manifests", "trees", "packs", "removed", "removed_bytes", "young",
        /// "pushes" (under way: then nothing is removed), "dry_run"}.
        #[arg(long)]
        json: bool,
        #[arg(long)]
        mount: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum MirrorCmd {
    /// Mirror DIR's snapshots to TARGET, a directory in another mounted scion store, where
    /// snapshot NAME arrives as TARGET/NAME (with TARGET/NAME/.snapshot/NAME). It starts with
    /// DIR's newest snapshot, sent whole, then sends each later one as an increment.
    Add {
        /// A directory in a scion mount (or a store path with --store).
        dir: PathBuf,
        /// The directory that receives them, in another mounted scion store; or another
        /// store's own directory (its root receives them; each transfer mounts it at a
        /// private directory if it is not mounted, and waits while another process holds it).
        #[arg(long)]
        to: PathBuf,
        /// Retention (of DIR's schedule) keeps the snapshots not mirrored yet.
        #[arg(long)]
        keep_unmirrored: bool,
        /// Work on the unmounted store in this directory (the mirror runs at its next mount).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Stop mirroring DIR (to TARGET only, with --to); what was sent stays.
    Remove {
        dir: PathBuf,
        #[arg(long)]
        to: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// Every mirror: directory, target, the newest snapshot sent and when, what is behind,
    /// what it is doing.
    Status {
        /// Any path in the mount (default: the current directory).
        path: Option<PathBuf>,
        /// JSON Lines: {"dir", "target", "last", "last_time", "behind", "next",
        /// "keep_unmirrored", "state"}.
        #[arg(long)]
        json: bool,
        #[arg(long)]
        store: Option<PathBuf>,
        /// For scripts: no header, fields separated by one tab (dir, target, last sent, when
        /// it arrived, behind, state).
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact times: seconds since the epoch (0: nothing sent yet).
        #[arg(short = 'p')]
        exact: bool,
    },
    /// One transfer, as the daemon runs it: `scion send SNAPSHOT [--base BASE]` into
    /// `scion receive TARGET/NAME --resumable`, going on from a transfer that stopped short,
    /// and checking the content hash of what arrived.
    #[command(hide = true)]
    SendOne {
        snapshot: PathBuf,
        #[arg(long)]
        to: PathBuf,
        #[arg(long)]
        base: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SnapshotCmd {
    /// Snapshot a directory on a schedule, thinned by a retention policy (kept in the store,
    /// run by the daemon). Exit 0: done; 1: --remove of a directory without a schedule;
    /// 2: bad usage or failure.
    ///
    /// Scheduled snapshots are named by their UTC time (2026-11-24T201502Z) and removed by
    /// the policy: one is kept if it is one of the newest `last`, or the newest of its hour
    /// among the newest `hourly` hours that have one, and so on for daily, weekly, monthly and
    /// yearly. Snapshots taken by hand are never removed.
    Schedule {
        /// The directory (in a scion mount, or a store path with --store).
        dir: Option<PathBuf>,
        /// Interval: Ns, Nm, Nh or Nd.
        #[arg(long)]
        every: Option<String>,
        /// Policy, any of last=N,hourly=N,daily=N,weekly=N,monthly=N,yearly=N
        /// (default last=10,hourly=24,daily=7,weekly=4,monthly=12).
        #[arg(long)]
        keep: Option<String>,
        /// Keep snapshots the policy gives up while the host filesystem has more than PCT%
        /// free; below it they go, oldest first.
        #[arg(long, value_name = "PCT")]
        keep_while_free: Option<u8>,
        /// Below PCT% free, remove even kept scheduled snapshots, oldest first (never the
        /// newest).
        #[arg(long, value_name = "PCT")]
        min_free: Option<u8>,
        /// List every schedule: directory, interval, policy, last and next run, count kept.
        #[arg(long)]
        list: bool,
        /// With --list: JSON Lines ({"dir", "every_s", "keep", "keep_while_free",
        /// "min_free", "last_run", "next_run", "kept"}).
        #[arg(long)]
        json: bool,
        /// With --list, for scripts: no header, fields separated by one tab (directory,
        /// interval, policy, last run, next run, kept).
        #[arg(short = 'H')]
        scripted: bool,
        /// With --list: exact numbers (the interval in seconds, times in seconds since the
        /// epoch; 0: none).
        #[arg(short = 'p')]
        exact: bool,
        /// Remove the directory's schedule (its snapshots stay).
        #[arg(long)]
        remove: bool,
        /// Work on the unmounted store in this directory (paths are then paths inside it).
        #[arg(long)]
        store: Option<PathBuf>,
    },
}

/// `scion man DIR`: a page per command, named as git's are (`scion-snapshot-schedule.1`).
fn man_pages(dir: &std::path::Path) -> Result<(), String> {
    fn write(cmd: clap::Command, name: String, dir: &std::path::Path, n: &mut usize) -> Result<(), String> {
        let cmd = cmd.name(name.clone());
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut out).map_err(|e| e.to_string())?;
        std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
        *n += 1;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub.clone(), format!("{name}-{}", sub.get_name()), dir, n)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut n = 0;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    write(cmd, "scion".into(), dir, &mut n)?;
    println!("{n} man pages in {}", dir.display());
    Ok(())
}

fn main() -> ExitCode {
    let args = fstab::args(std::env::args_os().collect());
    let cli = quick_parse(&args).unwrap_or_else(|| Cli::parse_from(args));
    let default_log = if matches!(cli.cmd, Cmd::Mount { .. }) {
        "info"
    } else {
        "warn"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_log))
        .format_timestamp_millis()
        .init();
    // A panic is a bug: say so loudly in the log (the daemon's stderr may be nowhere), with
    // where it happened, before the unwind reaches the code that marks the volume failed.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        log::error!(
            "PANIC (a bug in scion): {info}\n{}",
            std::backtrace::Backtrace::force_capture()
        );
        default_hook(info);
    }));
    let r = match cli.cmd {
        Cmd::Init { store } => init(&store),
        Cmd::Mount {
            store,
            mountpoint,
            foreground,
            quiet,
            options,
        } => {
            // `scion:STORE`, as the mount table once named a store (and as fstab lines may).
            // The mount's source is the store as given, so `umount scion:STORE` finds it
            // (umount of a directory's path looks for a mount point, never a source).
            if mount::store_arg(&store) != store {
                std::env::set_var(mount::SOURCE_ENV, &store);
            }
            let store = mount::store_arg(&store);
            if options.iter().any(|o| o == "remount") {
                mount::remount(&mountpoint, &options)
            } else if foreground {
                mount::foreground(&store, &mountpoint, &options)
            } else {
                mount::background(&store, &mountpoint, &options, quiet)
            }
        }
        Cmd::Umount { mountpoint } => mount::umount(&mountpoint),
        Cmd::Clone(CloneArgs {
            src,
            dst,
            exclude,
            template,
            store,
        }) => tree_cmds::clone(src, dst, exclude, template, store),
        Cmd::Snapshot {
            sub:
                Some(SnapshotCmd::Schedule {
                    dir,
                    every,
                    keep,
                    keep_while_free,
                    min_free,
                    list,
                    json,
                    scripted,
                    exact,
                    remove,
                    store,
                }),
            ..
        } => {
            let args = tree_cmds::ScheduleArgs {
                dir,
                every,
                keep,
                keep_while_free,
                min_free,
                list,
                remove,
                json,
                scripted,
                exact,
                store,
            };
            match tree_cmds::schedule(args) {
                Ok(code) => return code,
                Err(e) => Err(e),
            }
        }
        Cmd::Snapshot {
            sub: None,
            path,
            name,
            store,
        } => tree_cmds::snapshot(path.expect("clap requires a path"), name, store),
        Cmd::Destroy { path, store, recursive, mount } => tree_cmds::destroy(path, store, recursive, mount),
        Cmd::Repack {
            path,
            store,
            budget_mib,
        } => tree_cmds::repack(path, store, budget_mib.saturating_mul(1 << 20)),
        Cmd::Compress {
            path,
            store,
            level,
            budget_mib,
            json,
            progress,
        } => tree_cmds::compress(tree_cmds::CompressArgs {
            path,
            store,
            level: level.unwrap_or(0),
            budget: budget_mib.map_or(u64::MAX, |m| m.saturating_mul(1 << 20)),
            json,
            progress,
        }),
        Cmd::Versions {
            path,
            deleted,
            json,
            store,
        } => match tree_cmds::versions(path, deleted, json, store) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Cmd::Restore {
            path,
            from,
            to,
            replace,
            store,
        } => tree_cmds::restore(path, from, to, replace, store),
        Cmd::Rollback { dir, to, store } => match tree_cmds::rollback(dir, to, store) {
            Ok(()) => Ok(()),
            Err((libc::ENOENT, e)) => {
                eprintln!("scion: {}", humane(&e));
                return ExitCode::from(1);
            }
            Err((_, e)) => Err(e),
        },
        Cmd::Diff {
            a,
            b,
            json,
            stat,
            recursive,
            metadata,
            no_renames,
            patch,
            store,
        } => match diff_cmd::diff(
            a,
            b,
            diff_cmd::DiffFlags {
                json,
                stat,
                recursive,
                times: metadata,
                no_renames,
                patch,
            },
            store,
        ) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Cmd::Run {
            src,
            keep,
            apply,
            sandbox,
            command,
        } => match run_cmd::run(run_cmd::RunArgs {
            src,
            keep,
            apply,
            sandbox,
            command,
        }) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Cmd::Scan {
            paths,
            since,
            jobs,
            json,
            no_cache,
            command,
        } => match scan_cmd::scan(scan_cmd::ScanArgs {
            paths,
            since,
            jobs,
            json,
            no_cache,
            command,
        }) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Cmd::Send {
            path,
            base,
            output,
            no_compress,
            progress,
            resume,
            through,
            dedup,
        } => send_cmd::send(send_cmd::SendArgs {
            path,
            base,
            output,
            no_compress,
            progress,
            resume,
            through,
            dedup,
        }),
        Cmd::Receive {
            dir,
            input,
            progress,
            resumable,
            resume,
            abort,
            store,
        } => match receive_cmd::receive(receive_cmd::ReceiveArgs {
            dir,
            input,
            progress,
            resumable,
            resume,
            abort,
            store,
            shown: None,
            attach: None,
        }) {
            Ok(()) => Ok(()),
            Err(e) => {
                eprintln!("scion receive: {}", humane(&e));
                return ExitCode::from(1);
            }
        },
        Cmd::List { path, store, json, scripted, exact, orphaned } => {
            tree_cmds::list(path, store, json, scripted, exact, orphaned)
        }
        Cmd::Status { path, store, json } => status_cmd::status(path, store, json),
        Cmd::Serve { cmd: ServeCmd::Nfs { path, store, listen, export, read_only, squash, anon, max_held, stop } } => {
            serve_cmd::nfs(serve_cmd::Args { mountpoint: path, store, listen, export, read_only, squash, anon, max_held, stop })
        }
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "scion", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { dir } => man_pages(&dir),
        Cmd::Cube { cmd } => match cmd {
            CubeCmd::Create { dir, mode, on_error, convert, progress } => cube_cmd::create(dir, mode, on_error, convert, progress),
            CubeCmd::Remove { dir, progress } => cube_cmd::remove(dir, progress),
            CubeCmd::Set { dir, mode, on_error } => cube_cmd::set(dir, mode, on_error),
            CubeCmd::List { path, json, scripted, exact } => cube_cmd::list(path, json, scripted, exact),
            CubeCmd::Recover { dir } => cube_cmd::recover(dir),
            CubeCmd::Check { dir, json } => match cube_cmd::check(dir, json) {
                Ok(true) => Ok(()),
                Ok(false) => return ExitCode::from(1),
                Err(e) => Err(e),
            },
        },
        Cmd::Push { snapshot, remote, name, json } => remote_cmd::push(snapshot, remote, name, json),
        Cmd::Pull { remote, name, dir, version, prefetch, json } => remote_cmd::pull(remote, name, dir, version, prefetch, json),
        Cmd::Remote { cmd } => match cmd {
            RemoteCmd::Add { name, url, endpoint, region, mount, store } => remote_cmd::add(name, url, endpoint, region, mount, store),
            RemoteCmd::List { json, mount, store } => remote_cmd::list(json, mount, store),
            RemoteCmd::Gc { name, grace, dry_run, json, mount } => remote_cmd::gc(name, grace, dry_run, json, mount),
            RemoteCmd::Remove { name, mount, store } => match remote_cmd::remove(name, mount, store) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    eprintln!("scion remote: no such remote");
                    return ExitCode::from(1);
                }
                Err(e) => Err(e),
            },
        },
        Cmd::Mirror { cmd } => match cmd {
            MirrorCmd::Add { dir, to, keep_unmirrored, store } => mirror_cmd::add(dir, to, keep_unmirrored, store),
            MirrorCmd::Remove { dir, to, store } => match mirror_cmd::remove(dir, to, store) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    eprintln!("scion mirror: no such mirror");
                    return ExitCode::from(1);
                }
                Err(e) => Err(e),
            },
            MirrorCmd::Status { path, json, store, scripted, exact } => mirror_cmd::status(path, json, store, scripted, exact),
            MirrorCmd::SendOne { snapshot, to, base } => mirror_cmd::send_one(snapshot, base, to),
        },
        Cmd::Scrub { path, store, json } => match tree_cmds::scrub(path, store, json) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) if e.contains("damaged") => {
                eprint!("{e}");
                return ExitCode::from(1);
            }
            Err(e) => Err(e),
        },
        Cmd::Check { store, json, cube, repair: true } => match cube_cmd::repair(&store, cube.as_deref(), json) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Cmd::Check { store, json, cube, repair: false } => match cube_cmd::check_offline(&store, cube.as_deref(), json) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scion: {}", humane(&e));
            ExitCode::from(2)
        }
    }
}

/// `scion init`: the store directory is its owner's alone (mode 0700). Its packs hold every
/// file's bytes whatever the files' own modes, as a block device does, which only root and
/// the disk group may read.
/// The mode is set once the store exists: a refused init (a directory that is not empty)
/// leaves the directory as it was.
fn init(store: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    scion_fs::Fs::create(&scion_store::os_host(), store).map_err(|e| e.to_string())?;
    std::fs::set_permissions(store, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("{}: {e}", store.display()))?;
    println!("created store {}", store.display());
    Ok(())
}
