//! Bytes the CLI takes from users, decoded without trusting them: clone templates. Kept
//! apart from the commands so the fuzz targets (`fuzz/`) can reach them. (The control
//! protocol is `scion_daemon::wire`.)

use std::path::PathBuf;

/// A clone template: `scion clone --template FILE` (TOML).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    pub source: PathBuf,
    pub destination: PathBuf,
    #[serde(default)]
    pub exclude: Vec<PathBuf>,
}

/// Largest template file read: a template names two paths and some exclusions.
pub const MAX_TEMPLATE: usize = 1 << 20;

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.len() > MAX_TEMPLATE {
            return Err(format!("{} bytes, more than {MAX_TEMPLATE}", text.len()));
        }
        toml::from_str(text).map_err(|e| e.to_string())
    }
}
