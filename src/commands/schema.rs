use std::process::ExitCode;

pub fn run() -> anyhow::Result<ExitCode> {
    println!(
        "{}",
        serde_json::to_string_pretty(&ateam::manifest::raw::json_schema())?
    );
    Ok(ExitCode::SUCCESS)
}
