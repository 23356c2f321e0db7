//! `demo` — the README's main command: render the synthetic UAV world, pretrain a tiny model
//! on it, fine-tune it visual-only, motion-aware and as the motion control, evaluate all three
//! on held-out worlds, print the report.
//!
//! `cargo run --release -p motionvl-cli --bin demo -- --config configs/demo.toml`
//! Any `--section.key value` overrides a key of the config (e.g. `--train.optim.max_steps 20`).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "demo", about = "Pretrain, fine-tune and evaluate visual-only, motion-aware and control models on the synthetic UAV world")]
struct Cli {
    #[arg(long, default_value = "configs/demo.toml")]
    config: PathBuf,
    /// Hide progress bars.
    #[arg(long)]
    quiet: bool,
    /// `--section.key value` overrides.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    overrides: Vec<String>,
}

fn main() -> Result<()> {
    motionvl_cli::install_progress_bars();
    motionvl_cli::keep_freed_memory();
    let cli = Cli::parse_from(motionvl_train::recipe::overrides_last(std::env::args()));
    let mut overrides = Vec::new();
    let mut args = cli.overrides.iter();
    while let Some(flag) = args.next() {
        let Some(key) = flag.strip_prefix("--") else { bail!("unexpected argument `{flag}`") };
        let value = args.next().with_context(|| format!("`{flag}` needs a value"))?;
        overrides.push((key.to_owned(), value.clone()));
    }
    let config = motionvl_demo::DemoConfig::load(&cli.config, &overrides)?;
    let summary = motionvl_demo::run(&config, &cli.config, !cli.quiet)?;
    println!("\n{}", summary.report.markdown);
    for run in &summary.runs {
        println!(
            "{}: overall accuracy {:.1}% on {} questions (final training loss {}), reports in {}",
            run.name,
            100.0 * run.results.overall.accuracy,
            run.results.overall.n,
            run.final_loss.map_or("–".into(), |l| format!("{l:.3}")),
            run.eval_dir.display()
        );
    }
    println!("pretrained model (hub layout): {}", summary.pretrained.display());
    for path in &summary.written {
        println!("wrote {}", path.display());
    }
    println!("TensorBoard: tensorboard --logdir {}", config.output_dir.display());
    Ok(())
}
