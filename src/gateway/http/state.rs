//! What every handler shares: the gateway's services, stores, limits and flags.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use actix_web::web;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::constraint::LazyGrammars;
use crate::gateway::actors::request::Services;
use crate::gateway::admission::Quotas;
use crate::gateway::http::requests::RequestLimits;
use crate::model::tokenizer::Tokenizer;
use crate::store::{HistoryStore, PolicyStore, ResponseStore, TenantStore};

/// Everything the handlers share.
pub struct AppState {
    pub services: Services,
    pub tenants: Arc<dyn TenantStore>,
    pub policies: Arc<dyn PolicyStore>,
    pub history: Arc<dyn HistoryStore>,
    /// Responses kept for `previous_response_id` (the Responses API's `store`).
    pub responses: Arc<dyn ResponseStore>,
    pub tokenizer: Arc<Tokenizer>,
    /// Compiles response formats, grammars and tool calls for the served model.
    pub grammars: Arc<LazyGrammars>,
    pub limits: RequestLimits,
    pub admin_token: Option<String>,
    pub metrics: PrometheusHandle,
    pub body_limit: usize,
    pub quotas: Arc<Quotas>,
    /// Set on SIGTERM: not ready, new generations refused while in-flight ones finish.
    pub draining: Arc<AtomicBool>,
    pub started: u64,
    /// Derives each request's prefix-cache scope from its tenant.
    pub cache_scopes: crate::prefix::ScopeSecret,
}

pub type State = web::Data<AppState>;
