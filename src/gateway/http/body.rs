//! Reading a request's body with a size limit.

use actix_web::web;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::gateway::error::ApiError;

/// The body, refused with 413 past the limit (before any of it is parsed).
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(None, format!("reading the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}
