//! `loadgen --scenario chat-turns|agent`: the flags into the conversation scenario's
//! configuration, its run, and its report files.

use anyhow::Result;
use specgate::tools::conversations::{self, ConversationConfig, Variant};

use super::LoadgenArgs;

/// `loadgen --scenario chat-turns|agent`: the configurations over the same conversations.
pub(super) fn run(
    kind: conversations::Kind,
    args: &LoadgenArgs,
    cfg: &specgate::tools::loadgen::LoadgenConfig,
) -> Result<()> {
    let variants = args
        .configs
        .iter()
        .map(|c| match c.as_str() {
            "cache" => Ok(Variant::new(true, true)),
            "no-cache" => Ok(Variant::new(false, true)),
            "cache-plain" => Ok(Variant::new(true, false)),
            "no-cache-plain" => Ok(Variant::new(false, false)),
            other => anyhow::bail!("--configs: unknown configuration {other}"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // With only an admin token, a tenant of its own asks for the model id.
    let mut cfg = cfg.clone();
    if let (true, Some(admin)) = (cfg.key.is_empty(), &args.admin_token) {
        let name = format!("conv-{}", specgate::clock::unix_now());
        cfg.key = specgate::tools::loadgen::create_tenant(&cfg.url, admin, &name)?;
    }
    let model = specgate::tools::loadgen::model_id(&cfg)?;
    let ccfg = ConversationConfig {
        url: cfg.url.clone(),
        key: cfg.key.clone(),
        admin_token: args.admin_token.clone(),
        model,
        concurrency: cfg.concurrency.clone(),
        max_tokens: cfg.max_tokens,
        dir: args.conversations_dir.clone(),
        repeats: args.repeats,
        conversations: args.conversations,
        openai_only: args.openai_only,
        variants,
    };
    let run = conversations::run(&ccfg, kind, &mut std::io::stderr())?;
    let md = conversations::markdown(&run);
    println!("{md}");
    std::fs::create_dir_all(&args.out)?;
    let name = match kind {
        conversations::Kind::ChatTurns => "scenario-chat-turns",
        conversations::Kind::Agent => "scenario-agent",
    };
    std::fs::write(args.out.join(format!("{name}.md")), md)?;
    std::fs::write(
        args.out.join(format!("{name}.json")),
        serde_json::to_string_pretty(&run)?,
    )?;
    Ok(())
}
