//! `lockstep desync show FILE`: a desync report, readable, the fields that
//! differ first.

use clap::{Args, Subcommand};
use lockstep_core::desync::{REPORT_VERSION, Report};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub(crate) struct DesyncArgs {
    #[command(subcommand)]
    command: DesyncCommand,
}

#[derive(Debug, Subcommand)]
enum DesyncCommand {
    /// Print a desync report (a JSON file written by `lockstep demo
    /// --self-check` or `--inject-desync`, or by a game with `Report`).
    Show {
        /// The report.
        file: PathBuf,
    },
}

/// Why a report could not be shown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DesyncError {
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0} is not a desync report: {1}")]
    Parse(String, serde_json::Error),
    #[error("{0} is a version {1} report; this lockstep reads versions 1 to {REPORT_VERSION}")]
    Version(String, u32),
    #[error("could not write {0}: {1}")]
    Write(String, std::io::Error),
}

pub(crate) fn main(a: DesyncArgs) -> Result<(), DesyncError> {
    match a.command {
        DesyncCommand::Show { file } => {
            let report = read(&file)?;
            print!("{}", report.render());
            Ok(())
        }
    }
}

/// Reads and checks a report.
pub(crate) fn read(file: &Path) -> Result<Report, DesyncError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| DesyncError::Read(name.clone(), e))?;
    // The version first: a newer layout is refused by name, not as a
    // parse error.
    let version = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| DesyncError::Parse(name.clone(), e))?
        .get("version")
        .and_then(serde_json::Value::as_u64);
    match version {
        // Version 1 lacks only fields version 2 added as optional.
        Some(v) if (1..=u64::from(REPORT_VERSION)).contains(&v) => {}
        Some(v) => {
            return Err(DesyncError::Version(
                name,
                u32::try_from(v).unwrap_or(u32::MAX),
            ));
        }
        None => {}
    }
    serde_json::from_str(&text).map_err(|e| DesyncError::Parse(name, e))
}

/// Writes `report` to `file` as JSON.
pub(crate) fn write(report: &Report, file: &Path) -> Result<(), DesyncError> {
    let name = file.display().to_string();
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| DesyncError::Write(name.clone(), std::io::Error::other(e)))?;
    std::fs::write(file, json + "\n").map_err(|e| DesyncError::Write(name, e))
}
