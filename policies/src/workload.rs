//! Workload classes and the heuristic that guesses one from a prompt when the client does not
//! say. The class is half of a route (tenant × class): acceptance differs far more between
//! classes than between tenants, so it is what plans and history are kept by.

use std::fmt;
use std::str::FromStr;

/// What kind of text a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadClass {
    /// Edit or refactor code given in the prompt: the output copies most of it.
    CodeEdit,
    /// Answer from a passage given in the prompt, quoting it.
    Rag,
    /// Stories, poems, brainstorming: little of the output is in the prompt.
    Creative,
    /// Everything else.
    Chat,
    /// Output held to a grammar (a JSON schema, JSON mode, tool calls): its forced tokens
    /// and masks make it accept unlike its text's class, so it is a route of its own.
    Structured,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload {0:?} (known: code_edit, rag, creative, chat, structured)")]
pub struct UnknownWorkload(pub String);

impl WorkloadClass {
    pub const ALL: [WorkloadClass; 5] = [
        Self::CodeEdit,
        Self::Rag,
        Self::Creative,
        Self::Chat,
        Self::Structured,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::CodeEdit => "code_edit",
            Self::Rag => "rag",
            Self::Creative => "creative",
            Self::Chat => "chat",
            Self::Structured => "structured",
        }
    }
}

impl fmt::Display for WorkloadClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WorkloadClass {
    type Err = UnknownWorkload;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownWorkload(s.to_string()))
    }
}

const CODE_MARKERS: [&str; 10] = [
    "```",
    "fn ",
    "def ",
    "class ",
    "return ",
    "import ",
    "#include",
    "function ",
    "=>",
    "};",
];
const EDIT_VERBS: [&str; 9] = [
    "refactor", "rename", "fix", "rewrite", "edit", "change", "modify", "convert", "add ",
];
const RAG_MARKERS: [&str; 8] = [
    "passage",
    "context:",
    "document",
    "according to",
    "based on the",
    "quote",
    "excerpt",
    "article",
];
const CREATIVE_MARKERS: [&str; 8] = [
    "story",
    "poem",
    "imagine",
    "invent",
    "fairy tale",
    "haiku",
    "lyrics",
    "once upon",
];

/// Guess the class of a prompt (all of its text, system and user parts together).
///
/// The rule, in order: code markers (a fence, `fn `, `def `, `class `, …) with an editing verb
/// → `code_edit`; a long prompt (≥ 400 characters) that names a passage, document, context or
/// asks to quote → `rag`; a story, poem, haiku, … → `creative`; anything else → `chat`.
/// Cheap and deliberately conservative: `chat` gets the safe default plan.
pub fn classify(prompt: &str) -> WorkloadClass {
    let lower = prompt.to_lowercase();
    let has = |markers: &[&str]| markers.iter().any(|m| lower.contains(m));
    if has(&CODE_MARKERS) && has(&EDIT_VERBS) {
        WorkloadClass::CodeEdit
    } else if prompt.len() >= 400 && has(&RAG_MARKERS) {
        WorkloadClass::Rag
    } else if has(&CREATIVE_MARKERS) {
        WorkloadClass::Creative
    } else {
        WorkloadClass::Chat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in WorkloadClass::ALL {
            assert_eq!(c.name().parse::<WorkloadClass>(), Ok(c));
        }
        assert!("poetry".parse::<WorkloadClass>().is_err());
    }

    #[test]
    fn classify_table() {
        let passage = "The lighthouse was built in 1871 of granite. ".repeat(10);
        let cases = [
            (
                "Rename the variable x to count:\n```python\ndef f(x):\n    return x + 1\n```",
                WorkloadClass::CodeEdit,
            ),
            (
                "Fix the bug in fn main() { let v = 1; }",
                WorkloadClass::CodeEdit,
            ),
            (
                &*format!("Passage: {passage}\nAccording to the passage, when was it built?"),
                WorkloadClass::Rag,
            ),
            (
                "Write a short story about a robot.",
                WorkloadClass::Creative,
            ),
            ("What is the capital of France?", WorkloadClass::Chat),
            // Code without an edit verb is a question about code, not an edit.
            ("What does `def f(x): return x` do?", WorkloadClass::Chat),
            // A short prompt naming a document has no passage to copy from.
            ("Summarise the document.", WorkloadClass::Chat),
        ];
        for (prompt, want) in cases {
            assert_eq!(classify(prompt), want, "{prompt:?}");
        }
    }
}
