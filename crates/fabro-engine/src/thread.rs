//! Conversation threads under `full` fidelity (SPEC 6.5): the run-scoped store of live
//! agent sessions and prompt message lists, keyed by thread key.
//!
//! Threads live only in memory: a resumed run starts with an empty store, and a loop
//! restart clears it. The traversal resolves the key of each stage ([`thread_key`]) and
//! puts it in the context as `internal.thread_id`; the LLM handlers read it from there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fabro_agent::AgentSession;
use fabro_language::model::Fidelity;
use fabro_language::{EdgeIndex, NodeIndex, Workflow};
use fabro_llm::Message;

/// A live api-backend session shared by the nodes of one thread.
pub(crate) type SharedSession = Arc<tokio::sync::Mutex<LiveSession>>;

/// An agent session and the node its events are reported for (the node changes as
/// the thread moves on).
pub(crate) struct LiveSession {
    /// The session.
    pub(crate) session: AgentSession,
    /// Node id the session's event sink reports.
    pub(crate) node_id: Arc<Mutex<String>>,
}

/// The threads of a run.
#[derive(Default)]
pub(crate) struct ThreadStore {
    inner: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    /// Message lists of prompt nodes.
    prompts: HashMap<String, Vec<Message>>,
    /// Sessions of api agent nodes.
    sessions: HashMap<String, SharedSession>,
    /// Thread key of the most recent LLM stage, when it ran with `full`.
    last_full: Option<String>,
}

impl ThreadStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Threads> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread key of the most recent LLM stage, when it ran with `full`.
    pub(crate) fn last_full(&self) -> Option<String> {
        self.lock().last_full.clone()
    }

    /// Records the thread of the LLM stage that just ran (`None`: not `full`).
    pub(crate) fn set_last(&self, key: Option<String>) {
        self.lock().last_full = key;
    }

    /// Forgets every thread (a loop restart ends the epoch's threads, SPEC 6.5).
    pub(crate) fn clear(&self) {
        *self.lock() = Threads::default();
    }

    /// The message list of prompt thread `key` (empty when new).
    pub(crate) fn messages(&self, key: &str) -> Vec<Message> {
        self.lock().prompts.get(key).cloned().unwrap_or_default()
    }

    /// Replaces the message list of prompt thread `key`.
    pub(crate) fn set_messages(&self, key: &str, messages: Vec<Message>) {
        self.lock().prompts.insert(key.to_owned(), messages);
    }

    /// The live session of thread `key`.
    pub(crate) fn session(&self, key: &str) -> Option<SharedSession> {
        self.lock().sessions.get(key).cloned()
    }

    /// Stores the live session of thread `key`.
    pub(crate) fn set_session(&self, key: &str, session: SharedSession) {
        self.lock().sessions.insert(key.to_owned(), session);
    }
}

/// The thread key of `node` under `full` fidelity (SPEC 6.5), first match wins: node
/// `thread_id`; `thread_id` of the edge just traversed; graph `default_thread`; the
/// first class derived from an enclosing subgraph; the most recent LLM stage's key when
/// it ran with `full`; the node id. `None` when the fidelity is not `full` or the node
/// is not an LLM node.
pub(crate) fn thread_key(
    workflow: &Workflow,
    node: NodeIndex,
    entered_by: Option<EdgeIndex>,
    fidelity: Fidelity,
    store: &ThreadStore,
) -> Option<String> {
    let spec = workflow.node(node);
    if fidelity != Fidelity::Full || !spec.handler.is_llm() {
        return None;
    }
    spec.llm
        .thread_id()
        .or_else(|| entered_by.and_then(|edge| workflow.edge(edge).thread_id()))
        .map(str::to_owned)
        .or_else(|| workflow.settings.default_thread.clone())
        .or_else(|| spec.classes.first().cloned())
        .or_else(|| store.last_full())
        .or_else(|| Some(spec.id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::test_support::workflow;

    #[test]
    fn keys_follow_the_spec_order() {
        let workflow = workflow(
            r#"digraph {
                start [shape=Mdiamond] exit [shape=Msquare]
                a [shape=box, thread_id="t1"]
                b [shape=box]
                c [shape=tab]
                start -> a -> b
                b -> c [thread_id="edge"]
                c -> exit
            }"#,
        );
        let store = ThreadStore::default();
        let find = |id: &str| workflow.find(id).expect("node");
        let edge_into = |id: &str| workflow.incoming(find(id)).next().map(|(index, _)| index);
        let key =
            |id: &str, fidelity| thread_key(&workflow, find(id), edge_into(id), fidelity, &store);
        assert_eq!(key("a", Fidelity::Full).as_deref(), Some("t1"));
        assert_eq!(key("a", Fidelity::Compact), None);
        assert_eq!(key("c", Fidelity::Full).as_deref(), Some("edge"));
        assert_eq!(key("b", Fidelity::Full).as_deref(), Some("b"));
        store.set_last(Some("t1".to_owned()));
        assert_eq!(key("b", Fidelity::Full).as_deref(), Some("t1"));
        store.clear();
        assert_eq!(store.last_full(), None);
        store.set_messages("t", vec![Message::user("hi")]);
        assert_eq!(store.messages("t").len(), 1);
        assert!(store.messages("other").is_empty());
    }
}
