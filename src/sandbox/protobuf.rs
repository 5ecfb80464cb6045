//! Kubernetes protobuf request bodies (placeholder until the decoder lands).

/// A protobuf body that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("protobuf bodies are not supported yet; send JSON")]
pub struct ProtobufError;

/// Decodes a `application/vnd.kubernetes.protobuf` body to JSON.
pub fn decode_body(_body: &[u8]) -> Result<serde_json::Value, ProtobufError> {
    Err(ProtobufError)
}
