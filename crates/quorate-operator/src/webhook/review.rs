//! Reading an AdmissionReview body and writing the answer, shared by both webhooks. A body that
//! is not a review is answered with a refusal the API server can show, never with an HTTP error
//! the server would report as "failed calling webhook".

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::{StatusCause, StatusDetails};

/// The request of a review body, or the response that refuses an unreadable body.
pub(crate) fn read_request(
    body: &[u8],
) -> Result<AdmissionRequest<DynamicObject>, Box<AdmissionResponse>> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).map_err(|e| {
        Box::new(AdmissionResponse::invalid(format!(
            "the webhook received no readable AdmissionReview: {e}"
        )))
    })?;
    review.try_into().map_err(|_| {
        Box::new(AdmissionResponse::invalid(
            "the AdmissionReview has no request; send admission.k8s.io/v1 AdmissionReview requests",
        ))
    })
}

/// A refusal with an HTTP code and reason the API server passes on to the client (it keeps both
/// when the code is 400 or more) and, when known, the fields at fault.
pub(crate) fn refuse(
    request: &AdmissionRequest<DynamicObject>,
    code: u16,
    reason: &str,
    message: String,
    causes: Vec<StatusCause>,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = code;
    response.result.reason = reason.to_string();
    if !causes.is_empty() {
        response.result.details = Some(StatusDetails {
            name: request.name.clone(),
            group: request.kind.group.clone(),
            kind: request.kind.kind.clone(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
    }
    response
}

/// `namespace/name` of the object a request is about, for messages.
pub(crate) fn object_key(request: &AdmissionRequest<DynamicObject>) -> String {
    match request.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", request.name),
        _ => request.name.clone(),
    }
}

/// The refusal of an object that breaks validation rules: HTTP 422 with one cause per field.
pub(crate) fn refuse_invalid(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
    errors: &quorate_api::ValidationErrors,
) -> AdmissionResponse {
    let causes = errors
        .errors
        .iter()
        .map(|e| StatusCause {
            reason: "FieldValueInvalid".to_string(),
            message: e.message.clone(),
            field: e.path.clone(),
        })
        .collect();
    refuse(request, 422, "Invalid", message, causes)
}

/// The refusal of an object that does not decode: HTTP 400 naming the field.
pub(crate) fn refuse_unreadable(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
    path: &str,
    detail: &str,
) -> AdmissionResponse {
    let cause = StatusCause {
        reason: "FieldValueInvalid".to_string(),
        message: detail.to_string(),
        field: path.to_string(),
    };
    refuse(request, 400, "BadRequest", message, vec![cause])
}
