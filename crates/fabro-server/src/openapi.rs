//! The OpenAPI 3.1 document at `/api/v1/openapi.json` (SPEC 14.3), generated from the
//! handlers' `#[utoipa::path]` annotations and the request and response types, so that
//! it cannot drift from the routes.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::api;

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "fabro", description = "The fabro server API (SPEC section 14)"),
    paths(
        api::health,
        document,
        api::list_runs,
        api::create_run,
        api::get_run,
        api::cancel_run,
        api::resume_run,
        api::branching::fork_run,
        api::branching::rewind_run,
        api::events::events,
        api::files::graph_svg,
        api::files::stages,
        api::files::stage_file,
        api::files::stage_diff,
        api::files::artifacts,
        api::files::artifact,
        api::questions::questions,
        api::questions::answer,
        api::steer::steer,
        api::list_workflows,
        api::list_workers,
    ),
    components(schemas(crate::error::ErrorBody, crate::error::ErrorDetail, fabro_api::StoredEvent)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The top-level members of the document at `/api/v1/openapi.json` (OpenAPI 3.1): what
/// its schema says of it; the OpenAPI specification describes the rest. Only the
/// schema is used: the document served is utoipa's `OpenApi`.
#[derive(ToSchema)]
pub struct OpenApiDocument {
    /// `3.1.0`.
    pub openapi: String,
    /// Title, description and version.
    #[schema(value_type = Object)]
    pub info: serde_json::Value,
    /// Every route of SPEC 14.3, by path and method.
    #[schema(value_type = Object)]
    pub paths: serde_json::Value,
    /// The schemas of the bodies and the security scheme.
    #[schema(value_type = Object)]
    pub components: serde_json::Value,
    /// The bearer token, required unless a route says otherwise.
    #[schema(value_type = Vec<Object>)]
    pub security: serde_json::Value,
}

/// The OpenAPI 3.1 document of every route.
#[utoipa::path(get, path = "/api/v1/openapi.json", security(()), responses((status = 200, body = OpenApiDocument)))]
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
