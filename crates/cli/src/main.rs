//! The `scion` command line: thin wrappers over scion-fs and scion-fuse.

mod mount;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "scion", version, about = "A copy-on-write filesystem served through FUSE")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a new store in STORE (a new or empty directory on any filesystem).
    Init { store: PathBuf },
    /// Mount a store; runs in the background unless --foreground.
    Mount {
        store: PathBuf,
        mountpoint: PathBuf,
        /// Stay attached to the terminal instead of running in the background.
        #[arg(long, short = 'f')]
        foreground: bool,
        /// Mount options, comma separated (ro, noexec, nosuid, nodev, allow_other, ...).
        #[arg(short = 'o', value_delimiter = ',')]
        options: Vec<String>,
    },
    /// Unmount a scion mount, flush it and wait for its daemon to finish.
    Umount { mountpoint: PathBuf },
    /// Verify an unmounted store: checksums, reachability, reference counts, invariants.
    Check { store: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_log = if matches!(cli.cmd, Cmd::Mount { .. }) {
        "info"
    } else {
        "warn"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_log))
        .format_timestamp_millis()
        .init();
    let r = match cli.cmd {
        Cmd::Init { store } => scion_fs::Fs::create(&store)
            .map(|_| println!("created store {}", store.display()))
            .map_err(|e| e.to_string()),
        Cmd::Mount {
            store,
            mountpoint,
            foreground,
            options,
        } => {
            if foreground {
                mount::foreground(&store, &mountpoint, &options)
            } else {
                mount::background(&store, &mountpoint, &options)
            }
        }
        Cmd::Umount { mountpoint } => mount::umount(&mountpoint),
        Cmd::Check { store } => match scion_fs::check::check(&store) {
            Ok(rep) => {
                print!("{rep}");
                if rep.is_clean() {
                    Ok(())
                } else {
                    return ExitCode::from(1);
                }
            }
            Err(e) => Err(e.to_string()),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scion: {e}");
            ExitCode::from(2)
        }
    }
}
